package store

import (
	"fmt"
	"time"

	"github.com/tetherhq/tether/internal/protocol"
)

// The hub's memory for inventories is bounded twice (issue 33): one
// cluster's, whose agent may send anything its token allows, and all
// clusters' together, so that many agents, or one among many, can't take the
// hub past its memory limit. Bytes are counted as the hub's heap holds them
// (size.go), and a snapshot being received counts as much as one kept: both
// are in memory.

// DefaultClusterMaxBytes is the default bound on one cluster's inventory: its state and a
// snapshot being received, together. A pod's summary costs the hub about a
// kilobyte, so the largest clusters (150,000 pods) fit, with no room for a
// second copy: a new snapshot that needs the room pushes out the state it is
// to replace.
const DefaultClusterMaxBytes = 256 << 20

// DefaultMaxBytes is the default bound on every cluster's inventory
// together (TETHER_INVENTORY_MAX_BYTES). Go's collector lets the heap grow
// to about twice what it keeps, so this leaves a hub with the chart's 1 GiB
// limit room for everything else it does.
const DefaultMaxBytes = 256 << 20

// Config bounds what a Store holds. Zero values mean the defaults.
type Config struct {
	// MaxBytes bounds the bytes of every cluster's inventory together.
	// Past it, the cluster holding the most beyond its fair share (MaxBytes
	// divided among the clusters holding any) is dropped, and marked too
	// large, with why: never one within its share.
	MaxBytes int
	// ClusterMaxBytes bounds one cluster's; zero means
	// DefaultClusterMaxBytes, and it is never more than the MaxBytes above.
	ClusterMaxBytes int
	// Dropped, when set, is called with each cluster whose inventory a
	// Receiver's Apply dropped, for the bounds: the Receiver's own, or
	// another cluster's, which changed without an Update of its own. It is
	// called without the store's lock.
	Dropped func(cluster string)
}

func (c Config) withDefaults() Config {
	if c.MaxBytes <= 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if c.ClusterMaxBytes <= 0 {
		c.ClusterMaxBytes = DefaultClusterMaxBytes
	}
	c.ClusterMaxBytes = min(c.ClusterMaxBytes, c.MaxBytes)
	return c
}

// holding is what the store holds of one cluster besides its kept state.
type holding struct {
	bytes   int                 // of the kept state and the snapshots being received
	pending map[*state]struct{} // the snapshots being received
}

// Bytes returns what the store holds, in bytes of heap as size.go counts
// them: every cluster's kept state and snapshots being received.
func (s *Store) Bytes() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.total
}

// ClusterBytes returns what the store holds of cluster, as Bytes counts.
func (s *Store) ClusterBytes(cluster string) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if h := s.held[cluster]; h != nil {
		return h.bytes
	}
	return 0
}

func (s *Store) holdingLocked(cluster string) *holding {
	h := s.held[cluster]
	if h == nil {
		h = &holding{pending: map[*state]struct{}{}}
		s.held[cluster] = h
	}
	return h
}

// newStateLocked returns a snapshot of cluster that r begins to receive.
func (s *Store) newStateLocked(cluster string, r *Receiver, tieBreaker string) *state {
	st := &state{objects: map[string]map[string]*protocol.Resource{}, tieBreaker: tieBreaker, store: s, cluster: cluster, receiver: r}
	s.holdingLocked(cluster).pending[st] = struct{}{}
	// Small, and bounded by one message: counted, never refused.
	s.countLocked(st, stateSize+stringSize(tieBreaker))
	return st
}

// commitLocked makes the complete snapshot st the cluster's kept state, in
// place of the one before.
func (s *Store) commitLocked(st *state) {
	if old := s.clusters[st.cluster]; old != nil {
		s.dropStateLocked(old)
	}
	delete(s.holdingLocked(st.cluster).pending, st)
	st.receiver = nil
	s.clusters[st.cluster] = st
}

func (s *Store) countLocked(st *state, n int) {
	st.bytes += n
	s.holdingLocked(st.cluster).bytes += n
	s.total += n
}

// chargeLocked is state.charge for a state of s: it counts grows, and when
// they grow st, only within the cluster's bound and the store's. Past the
// store's, it drops the cluster that holds the most beyond its fair share,
// until there is room: st's own, when that is st's cluster.
func (s *Store) chargeLocked(st *state, grows int) bool {
	if st.dropped {
		return false
	}
	h := s.holdingLocked(st.cluster)
	if grows <= 0 {
		s.countLocked(st, grows)
		return true
	}
	if h.bytes+grows > s.cfg.ClusterMaxBytes {
		// A snapshot that needs the room of the state it is to replace
		// pushes that state out: the cluster shows no inventory until the
		// snapshot completes, rather than a truncated one after.
		if kept := s.clusters[st.cluster]; kept != nil && kept != st && st.receiver != nil && kept.bytes > 0 {
			s.dropStateLocked(kept)
			delete(s.clusters, st.cluster)
			s.dropped = append(s.dropped, st.cluster)
		}
		if h.bytes+grows > s.cfg.ClusterMaxBytes {
			return false
		}
	}
	for s.total+grows > s.cfg.MaxBytes {
		s.refuseLocked(s.overShareLocked(st.cluster, grows))
		if st.dropped {
			return false
		}
	}
	s.countLocked(st, grows)
	return true
}

// overShareLocked returns the cluster holding the most beyond its fair
// share of the store's bound, counting grows more for cluster: the store is
// over its bound, so some cluster is over its share.
func (s *Store) overShareLocked(cluster string, grows int) string {
	holders := 0
	for c, h := range s.held {
		if h.bytes > 0 || c == cluster {
			holders++
		}
	}
	share := s.cfg.MaxBytes / max(holders, 1)
	victim, most := cluster, 0
	for c, h := range s.held {
		b := h.bytes
		if c == cluster {
			b += grows
		}
		if b > share && (b > most || b == most && c < victim) {
			victim, most = c, b
		}
	}
	return victim
}

// refuseLocked drops everything the store holds of cluster, and marks it
// too large: its agent's Updates change nothing more until its next
// snapshot.
func (s *Store) refuseLocked(cluster string) {
	h := s.holdingLocked(cluster)
	had, holders := h.bytes, 0
	for _, o := range s.held {
		if o.bytes > 0 {
			holders++
		}
	}
	s.dropClusterLocked(cluster)
	why := fmt.Sprintf("The hub dropped this cluster's inventory: its inventories may take %s in all (TETHER_INVENTORY_MAX_BYTES), "+
		"and this cluster's took %s, more than its share of %s among %d clusters. The inventory comes back when the agent connects again, if it fits.",
		mib(s.cfg.MaxBytes), mib(had), mib(s.cfg.MaxBytes/max(holders, 1)), holders)
	s.clusters[cluster] = &state{store: s, cluster: cluster, tooLarge: why, truncated: true, updated: time.Now()}
	s.dropped = append(s.dropped, cluster)
}

// dropClusterLocked lets go of cluster's kept state and the snapshots being
// received.
func (s *Store) dropClusterLocked(cluster string) {
	s.dropPendingLocked(cluster)
	if kept := s.clusters[cluster]; kept != nil {
		s.dropStateLocked(kept)
		delete(s.clusters, cluster)
	}
}

// dropPendingLocked lets go of the snapshots of cluster being received.
func (s *Store) dropPendingLocked(cluster string) {
	if h := s.held[cluster]; h != nil {
		for st := range h.pending {
			s.dropStateLocked(st)
		}
	}
}

// dropStateLocked stops counting st and lets go of its objects at once,
// whoever still points at st: a Receiver that is never given another
// Update must not keep them in memory.
func (s *Store) dropStateLocked(st *state) {
	if st.dropped {
		return
	}
	s.countLocked(st, -st.bytes)
	st.dropped = true
	st.objects, st.kinds, st.count = nil, nil, 0
	delete(s.holdingLocked(st.cluster).pending, st)
}

// mib says n bytes in MiB, for people.
func mib(n int) string {
	return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20))
}
