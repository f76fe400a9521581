package web

import (
	"github.com/tetherhq/tether/internal/inventory"
	"github.com/tetherhq/tether/internal/protocol"
)

// kindFound is one lookup of accessCheck.kind, kept for the query.
type kindFound struct {
	kind inventory.Kind
	ok   bool
}

// kindOf returns the kind people call name in cluster: one of
// inventory.Kinds, or one of the agent's TETHER_INVENTORY_KINDS_EXTRA that
// the cluster's inventory announces (issue 36).
func (wb *Web) kindOf(cluster, name string) (inventory.Kind, bool) {
	if k, ok := inventory.LookupKind(name); ok {
		return k, true
	}
	info, ok := wb.cfg.Clusters.Inventory().Info(cluster)
	if !ok {
		return inventory.Kind{}, false
	}
	return extraKind(info.Kinds, name)
}

// extraKind finds the extra kind name among an agent's kind states. The
// name, group and resource all come from the agent: they must agree
// ("<resource>.<group>", or "<resource>" in the core group), so that the
// access review asks about the resource the name says, and never about
// Secrets, which the hub keeps none of.
func extraKind(states []protocol.KindState, name string) (inventory.Kind, bool) {
	for _, s := range states {
		if s.Kind != name || s.Resource == "" {
			continue
		}
		want := s.Resource
		if s.Group != "" {
			want += "." + s.Group
		}
		if want != name || s.Group == "" && s.Resource == "secrets" {
			return inventory.Kind{}, false
		}
		return inventory.Kind{Name: name, Group: s.Group, Namespaced: s.Namespaced, Extra: true}, true
	}
	return inventory.Kind{}, false
}

// kind is kindOf for c's cluster, looked up once per query: a fleet-wide
// query asks once per namespace with matches.
func (c *accessCheck) kind(name string) (inventory.Kind, bool) {
	if k, ok := inventory.LookupKind(name); ok {
		return k, true
	}
	c.mu.Lock()
	f, done := c.kinds[name]
	c.mu.Unlock()
	if done {
		return f.kind, f.ok
	}
	f.kind, f.ok = c.h.kindOf(c.cluster, name)
	c.mu.Lock()
	if c.kinds == nil {
		c.kinds = map[string]kindFound{}
	}
	c.kinds[name] = f
	c.mu.Unlock()
	return f.kind, f.ok
}
