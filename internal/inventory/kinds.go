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
	"strings"

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
	// FieldSelector, when set, narrows the list and watch on the API
	// server's side: the agent never holds what it would only drop.
	FieldSelector string
	// Extra is a kind of TETHER_INVENTORY_KINDS_EXTRA: summarized
	// generically, and Namespaced as discovery says.
	Extra bool
}

// Resource returns the kind's group and resource, without a version.
func (k Kind) Resource() schema.GroupResource {
	return schema.GroupResource{Group: k.Group, Resource: k.Plural()}
}

// Plural is the kind's resource as the API server names it: Name, but
// for an extra kind, whose Name carries its group.
func (k Kind) Plural() string {
	if k.Extra && k.Group != "" {
		return strings.TrimSuffix(k.Name, "."+k.Group)
	}
	return k.Name
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
	// Issue 36: what operators look at every day.
	{Name: "replicasets", Group: "apps", Namespaced: true, Versions: []string{"v1"}},
	{Name: "resourcequotas", Namespaced: true, Versions: []string{"v1"}},
	// Warning events only: the rest is the cluster's chatter, and most of
	// its events.
	{Name: "events", Namespaced: true, Versions: []string{"v1"}, FieldSelector: "type=Warning"},
	{Name: "virtualservices", Group: "networking.istio.io", Namespaced: true, Versions: []string{"v1", "v1beta1", "v1alpha3"}},
	{Name: "rollouts", Group: "argoproj.io", Namespaced: true, Versions: []string{"v1alpha1"}},
	{Name: "workflows", Group: "argoproj.io", Namespaced: true, Versions: []string{"v1alpha1"}},
	{Name: "workflowtemplates", Group: "argoproj.io", Namespaced: true, Versions: []string{"v1alpha1"}},
	{Name: "sparkapplications", Group: "sparkoperator.k8s.io", Namespaced: true, Versions: []string{"v1beta2"}},
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
