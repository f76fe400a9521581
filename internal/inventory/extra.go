package inventory

import (
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// ErrSecrets is wrapped by ParseExtraKinds' error for a list naming
// Secrets: the inventory leaves the cluster, and a Secret's name and labels
// are the first step to its data.
var ErrSecrets = errors.New("the inventory never reads Secrets")

// ParseExtraKinds reads a list of extra kinds, "group/version/resource"
// separated by commas ("v1/configmaps" or "/v1/configmaps" for the core
// group). Each is named "<resource>.<group>" ("<resource>" in the core
// group), so Gateway API's gateways and Istio's, or events.k8s.io's events
// and the core group's, never share a name. A kind the agent watches
// already, a repeat, or Secrets is refused.
func ParseExtraKinds(s string) ([]Kind, error) {
	var out []Kind
	seen := map[string]bool{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		parts := strings.Split(item, "/")
		if len(parts) == 2 {
			parts = append([]string{""}, parts...)
		}
		if len(parts) != 3 || parts[1] == "" || parts[2] == "" {
			return nil, fmt.Errorf("%q is not group/version/resource, like argoproj.io/v1alpha1/appprojects or v1/configmaps", item)
		}
		group, version, resource := strings.ToLower(parts[0]), parts[1], strings.ToLower(parts[2])
		if errs := validation.IsDNS1123Label(resource); len(errs) > 0 {
			return nil, fmt.Errorf("%q: resource %q is not a resource's plural name: %s", item, resource, errs[0])
		}
		if group != "" {
			if errs := validation.IsDNS1123Subdomain(group); len(errs) > 0 {
				return nil, fmt.Errorf("%q: group %q is not an API group: %s", item, group, errs[0])
			}
		}
		if errs := validation.IsDNS1123Label(version); len(errs) > 0 {
			return nil, fmt.Errorf("%q: version %q is not an API version: %s", item, version, errs[0])
		}
		if group == "" && resource == "secrets" {
			return nil, fmt.Errorf("%q: %w", item, ErrSecrets)
		}
		name := resource
		if group != "" {
			name += "." + group
		}
		for _, k := range Kinds {
			if k.Group == group && k.Name == resource {
				return nil, fmt.Errorf("%q: Tether watches %s already", item, resource)
			}
		}
		if seen[name] {
			return nil, fmt.Errorf("%q is named twice", item)
		}
		seen[name] = true
		out = append(out, Kind{Name: name, Group: group, Versions: []string{version}, Extra: true})
	}
	return out, nil
}
