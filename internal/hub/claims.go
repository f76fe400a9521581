package hub

import (
	"slices"
	"time"

	"github.com/tetherhq/tether/internal/inventory/store"
)

// Hub replicas (SPEC section 8): each replica holds the agents that
// connected to it, and tells the others which clusters those are
// (internal/peers). What it hears of another replica's clusters is kept
// here as claims, so that Reach, Clusters and Subscribe answer for every
// cluster of the fleet, wherever its agent is.

// Claim is a replica's word that it holds the agent of a cluster.
type Claim struct {
	// Replica is the replica that holds the agent.
	Replica string
	// Since is when the agent connected there. Of two claims on one
	// cluster the newer wins, as the newest agent does on one hub; equal
	// times go to the replica whose name sorts last.
	Since time.Time
	// Instance and Connection are the agent's hello's: two connections
	// of one agent process are ordered by Connection, not by the clocks
	// of the replicas they reached, which may differ by more than the
	// agent took to connect again.
	Instance   string
	Connection uint64
	// Status and History are the cluster's status and recent changes as
	// the holder sees them (History newest first).
	Status  ClusterStatus
	History []StatusChange
	// Inventory is what the holder keeps of the cluster's inventory as a
	// whole (its summary, the kinds' states), for the fleet page; nil
	// before its agent sent any. Queries of the objects go to the holder.
	Inventory *store.Info
	// Upstream is the way to the cluster's API server through the holder;
	// nil in what Held returns.
	Upstream Upstream
}

// newer reports whether c is a newer claim than o.
func (c *Claim) newer(o *Claim) bool {
	if c.Instance != "" && c.Instance == o.Instance {
		return c.Connection > o.Connection
	}
	if !c.Since.Equal(o.Since) {
		return c.Since.After(o.Since)
	}
	return c.Replica > o.Replica
}

// claimOf is what c, connected here, would claim.
func (h *Hub) claimOf(c *agentConn) *Claim {
	return &Claim{Replica: h.cfg.Replica, Since: c.since, Instance: c.instance, Connection: c.connection}
}

// Held returns this replica's claim of cluster name, if an agent of it is
// connected here: what the peers are told.
func (h *Hub) Held(name string) (Claim, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.agents[name]
	if _, direct := h.cfg.Direct[name]; c == nil || direct {
		// The clusters the hub reaches itself are every replica's own.
		return Claim{}, false
	}
	claim := *h.claimOf(c)
	claim.Status, claim.History = h.clusterLocked(name), h.historyLocked(name)
	if info, ok := h.inventory.Info(name); ok {
		claim.Inventory = &info
	}
	return claim, true
}

// InventoryInfo returns what is known of cluster name's inventory as a
// whole: this replica's, or, for a cluster whose agent another holds,
// what that replica's claim says.
func (h *Hub) InventoryInfo(name string) (store.Info, bool) {
	h.mu.Lock()
	c := h.claimLocked(name)
	local := h.agents[name] != nil
	h.mu.Unlock()
	if c != nil && !local {
		if c.Inventory == nil {
			return store.Info{}, false
		}
		return *c.Inventory, true
	}
	return h.inventory.Info(name)
}

// HeldNames returns the clusters whose agents are connected here, but the
// clusters the hub reaches itself.
func (h *Hub) HeldNames() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	names := make([]string, 0, len(h.agents))
	for n := range h.agents {
		if _, direct := h.cfg.Direct[n]; !direct {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

// Local returns the way to cluster name's API server through an agent
// connected to this replica, or nil: a replica asked by another to carry a
// request never passes it on again.
func (h *Hub) Local(name string) Upstream {
	if c := h.connected(name); c != nil {
		return c
	}
	return nil
}

// SetClaim records replica's claim of cluster name, or, with a nil claim,
// that replica no longer holds it. An agent of the cluster connected here
// before the claim's agent connected there has been taken over, and is
// told so (SPEC section 2), as on one hub.
func (h *Hub) SetClaim(replica, name string, claim *Claim) {
	h.mu.Lock()
	if claim == nil {
		gone := h.dropClaimLocked(name, replica)
		h.mu.Unlock()
		h.events.changed(name)
		if gone != nil {
			h.setStatus(name, gone.Status.AgentVersion, notConnected(h.clock.Now()))
		}
		return
	}
	claim.Replica = replica
	h.texts.status(&claim.Status)
	// A copy, so the caller's slice is left as it was, without the spare
	// room a decoder's may have.
	claim.History = slices.Clone(claim.History)
	for i := range claim.History {
		claim.History[i].Status = h.texts.of(claim.History[i].Status)
	}
	cs := h.claims[name]
	if i := slices.IndexFunc(cs, func(c *Claim) bool { return c.Replica == replica }); i >= 0 {
		cs[i] = claim
	} else {
		h.claims[name] = append(cs, claim)
	}
	var taken *agentConn
	if c := h.agents[name]; c != nil && claim.newer(h.claimOf(c)) {
		if c.moving.Load() {
			// The move this hub asked for: no takeover.
			h.retireLocked(c)
		} else {
			taken = c
		}
	}
	h.mu.Unlock()
	h.events.changed(name)
	if taken == nil {
		return
	}
	h.metrics.takeovers.Inc()
	h.log.Warn("An agent was taken over by another agent with the same name and token",
		"agent", name, "replica", replica, "previousRemote", taken.remote)
	h.conns.Add(1)
	go func() {
		defer h.conns.Done()
		taken.goAway(goAwayTakeover, 0)
	}()
}

// ForgetReplica drops every claim of replica: it has gone, or can't be
// reached. Its clusters are Unreachable until their agents connect again,
// to a replica that is still here.
func (h *Hub) ForgetReplica(replica string) {
	h.mu.Lock()
	delete(h.peers, replica)
	var names []string
	gone := map[string]*Claim{}
	for name, cs := range h.claims {
		if slices.ContainsFunc(cs, func(c *Claim) bool { return c.Replica == replica }) {
			names = append(names, name)
			if c := h.dropClaimLocked(name, replica); c != nil {
				gone[name] = c
			}
		}
	}
	h.mu.Unlock()
	for _, n := range names {
		h.events.changed(n)
	}
	now := h.clock.Now()
	for n, c := range gone {
		h.setStatus(n, c.Status.AgentVersion, notConnected(now))
	}
}

// dropClaimLocked drops replica's claim of cluster name. If that leaves
// the cluster with no agent here or elsewhere, it returns the claim
// dropped: the cluster's status here becomes its agent's absence, with
// the time it went, as when an agent connected here leaves.
func (h *Hub) dropClaimLocked(name, replica string) *Claim {
	var c *Claim
	cs := h.claims[name]
	if i := slices.IndexFunc(cs, func(c *Claim) bool { return c.Replica == replica }); i >= 0 {
		c = cs[i]
		cs = slices.Delete(cs, i, i+1)
	}
	if len(cs) == 0 {
		delete(h.claims, name)
	} else {
		h.claims[name] = cs
	}
	if c == nil || h.agents[name] != nil || h.claimLocked(name) != nil {
		return nil
	}
	return c
}

// claimLocked returns the newest claim of cluster name, or nil.
func (h *Hub) claimLocked(name string) *Claim {
	var best *Claim
	for _, c := range h.claims[name] {
		if best == nil || c.newer(best) {
			best = c
		}
	}
	return best
}
