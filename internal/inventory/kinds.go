// Package inventory is what the agent's watch and the hub's store agree on
// besides the wire format (internal/protocol): which kinds the inventory
// holds, and how people name them.
//
// The agent's side is in internal/inventory/watch, the hub's in
// internal/inventory/store; neither imports the other.
package inventory

import (
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Kind is one kind the agent watches.
type Kind struct {
	// Name is the plural resource name people query by, like "pods". It is
	// unique among the default kinds.
	Name       string
	Group      string
	Namespaced bool
	// Versions are the versions the summary understands, preferred first.
	// The agent watches the first that the cluster serves.
	Versions []string
}

// Resource returns the kind's group and resource, without a version.
func (k Kind) Resource() schema.GroupResource {
	return schema.GroupResource{Group: k.Group, Resource: k.Name}
}

// Kinds are the kinds the agent watches (SPEC section 5), each only when the
// cluster serves its API.
var Kinds = []Kind{
	{Name: "nodes", Versions: []string{"v1"}},
	{Name: "namespaces", Versions: []string{"v1"}},
	{Name: "pods", Namespaced: true, Versions: []string{"v1"}},
	{Name: "services", Namespaced: true, Versions: []string{"v1"}},
	{Name: "deployments", Group: "apps", Namespaced: true, Versions: []string{"v1"}},
	{Name: "statefulsets", Group: "apps", Namespaced: true, Versions: []string{"v1"}},
	{Name: "daemonsets", Group: "apps", Namespaced: true, Versions: []string{"v1"}},
	{Name: "jobs", Group: "batch", Namespaced: true, Versions: []string{"v1"}},
	{Name: "cronjobs", Group: "batch", Namespaced: true, Versions: []string{"v1"}},
	{Name: "ingresses", Group: "networking.k8s.io", Namespaced: true, Versions: []string{"v1"}},
	{Name: "applications", Group: "argoproj.io", Namespaced: true, Versions: []string{"v1alpha1"}},
	{Name: "gateways", Group: "networking.istio.io", Namespaced: true, Versions: []string{"v1", "v1beta1", "v1alpha3"}},
}

// LookupKind returns the kind people call name.
func LookupKind(name string) (Kind, bool) {
	for _, k := range Kinds {
		if k.Name == name {
			return k, true
		}
	}
	return Kind{}, false
}

// KindNames lists the kinds' names, sorted, for error messages.
func KindNames() []string {
	names := make([]string, len(Kinds))
	for i, k := range Kinds {
		names[i] = k.Name
	}
	sort.Strings(names)
	return names
}

// ErrUnknownKind is wrapped by errors for a kind that isn't one of Kinds.
var ErrUnknownKind = fmt.Errorf("unknown kind")
