// Package store is the hub's side of the inventory (SPEC section 5): the
// hub's copy of every connected cluster's summary, built from the updates
// its agent streams, bounded in objects and in bytes of heap, and the
// queries the pages and the resources API answer from it.
//
// It exists apart from the hub so that its bounds and queries can be tested
// without a tunnel, and apart from the agent's watch, which it never imports:
// the two agree only through internal/protocol and inventory.Kinds.
package store

import (
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/tetherhq/tether/internal/inventory"
	"github.com/tetherhq/tether/internal/protocol"
	"k8s.io/apimachinery/pkg/labels"
)

// Store is the hub's copy of every cluster's inventory, in memory. Each
// cluster's state is replaced as a whole by each complete snapshot, so a
// reconnected agent leaves no ghosts of objects deleted while it was away.
//
// What it holds is bounded (budget.go): per cluster, its state and a
// snapshot being received together, and across clusters, all of them.
type Store struct {
	mu       sync.RWMutex // guards the following, and every state's objects, kept or being received
	clusters map[string]*state
	// ends counts each cluster's calls to Forget and End: a Receiver made
	// before the last of them changes nothing, however late its Updates.
	ends map[string]uint64

	cfg     Config
	held    map[string]*holding // by cluster: the bytes of its states, kept and being received
	total   int                 // held's bytes, together
	dropped []string            // clusters whose inventory an Apply let go of, for cfg.Dropped
}

// MaxObjects bounds the objects the hub keeps of one cluster, so an agent
// can't make the hub hold more than a very large cluster's worth. Past it,
// new objects are left out (changes to those kept still apply) and the
// cluster's state says so.
const MaxObjects = 1_000_000

// state is one cluster's inventory, kept or being received.
type state struct {
	objects    map[string]map[string]*protocol.Resource // kind → "namespace/name" → summary
	count      int                                      // objects in all kinds
	bytes      int                                      // what they and kinds cost the hub's heap (size.go)
	maxBytes   int                                      // 0: DefaultClusterMaxBytes; for a state without a store (tests)
	truncated  bool                                     // some were left out: over MaxObjects or a bound on bytes
	kinds      []protocol.KindState
	tieBreaker string
	updated    time.Time

	// Set by the store that holds the state, under its lock.
	store    *Store
	cluster  string
	receiver *Receiver // the one receiving it, while it is a snapshot not yet complete
	dropped  bool      // the store let it go (budget.go): nothing more is applied to it
	tooLarge string    // why the store dropped the cluster's inventory: this state holds none of it

	// counted is the Summary as last counted, nil since the state changed:
	// every open page asks for it at each change, and counting walks every
	// node, pod and application. Info fills it under the store's read lock,
	// so it has a lock of its own.
	countMu sync.Mutex
	counted *Summary
}

// New returns an empty Store that holds no more than cfg allows.
func New(cfg Config) *Store {
	return &Store{clusters: map[string]*state{}, ends: map[string]uint64{}, held: map[string]*holding{}, cfg: cfg.withDefaults()}
}

// Receiver applies one connection's Updates to the store's state of one
// cluster. It is not safe for concurrent use: each connection has its own,
// and closes it when the connection ends.
type Receiver struct {
	store     *Store
	cluster   string
	end       uint64 // the cluster's ends when it was made
	pending   *state // a snapshot being received
	committed *state // the snapshot it completed last: its Updates change it while the store keeps it
}

// Receiver returns a Receiver for a new connection of cluster.
func (s *Store) Receiver(cluster string) *Receiver {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return &Receiver{store: s, cluster: cluster, end: s.ends[cluster]}
}

// End makes the Receivers of cluster made so far change nothing more, and
// keeps its state: its agent was taken over, and the next connection's
// snapshot replaces it. The snapshots they were receiving are let go.
func (s *Store) End(cluster string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ends[cluster]++
	s.dropPendingLocked(cluster)
}

// Close lets go of the snapshot r was receiving, if any: its connection
// ended, and the snapshot can never complete. The state r completed stays.
func (r *Receiver) Close() {
	r.store.mu.Lock()
	defer r.store.mu.Unlock()
	if r.pending != nil {
		r.store.dropStateLocked(r.pending)
		r.pending = nil
	}
}

// Apply takes one Update. It reports whether the store changed.
func (r *Receiver) Apply(u *protocol.Update, now time.Time) bool {
	s := r.store
	s.mu.Lock()
	changed := r.applyLocked(u, now)
	dropped := s.dropped
	s.dropped = nil
	s.mu.Unlock()
	if s.cfg.Dropped != nil {
		for _, c := range dropped {
			s.cfg.Dropped(c)
		}
	}
	return changed || slices.Contains(dropped, r.cluster)
}

func (r *Receiver) applyLocked(u *protocol.Update, now time.Time) bool {
	s := r.store
	if s.ends[r.cluster] != r.end {
		return false // forgotten, or taken over, meanwhile
	}
	if u.Snapshot {
		if r.pending != nil {
			s.dropStateLocked(r.pending) // a snapshot begun again: the first never completes
		}
		r.pending = s.newStateLocked(r.cluster, r, u.GatewayTieBreaker)
		r.committed = nil
	}
	if r.pending != nil && r.pending.dropped {
		// Dropped for another cluster's room: Updates are ignored until
		// the next snapshot.
		r.pending = nil
	}
	if r.pending != nil {
		st := r.pending
		st.apply(u)
		if st.dropped {
			r.pending = nil // over its share of the store: Updates are ignored until the next snapshot
			return false
		}
		if !u.Complete {
			return false
		}
		st.updated = now
		s.commitLocked(st)
		r.pending, r.committed = nil, st
		return true
	}
	st := s.clusters[r.cluster]
	if st == nil || st != r.committed {
		// Changes before any snapshot (the agent broke the protocol), or
		// to a state the store let go of: ignore them.
		return false
	}
	st.apply(u)
	st.updated = now
	if st.dropped {
		r.committed = nil
	}
	return true
}

func (st *state) apply(u *protocol.Update) {
	if st.dropped {
		return
	}
	st.counted = nil // apply runs under the store's write lock: no Info counts now
	if u.Kinds != nil {
		if !st.charge(kindsSize(u.Kinds) - kindsSize(st.kinds)) {
			return // dropped; a state over its bound keeps its kinds, which are small
		}
		st.kinds = u.Kinds
	}
	for i := range u.Upserts {
		res := u.Upserts[i]
		byKey := st.objects[res.Kind]
		if byKey == nil {
			if !st.holds(res.Kind) {
				// No query can ask for it (a newer agent's kind, or a made-up
				// one): holding it would only let an agent fill the hub with
				// kinds that count toward neither MaxObjects nor the bytes.
				continue
			}
			byKey = map[string]*protocol.Resource{}
			st.objects[res.Kind] = byKey
		}
		k := key(res.Namespace, res.Name)
		size := resourceSize(&res)
		old, ok := byKey[k]
		grows := size
		if ok {
			grows -= resourceSize(old)
		}
		if !ok && st.count >= MaxObjects || !st.charge(grows) {
			if st.dropped {
				return
			}
			st.truncated = true
			continue // a kept object keeps its last summary
		}
		if !ok {
			st.count++
		}
		byKey[k] = &res
	}
	for _, ref := range u.Deletes {
		k := key(ref.Namespace, ref.Name)
		byKey := st.objects[ref.Kind]
		if old, ok := byKey[k]; ok {
			delete(byKey, k)
			st.count--
			st.charge(-resourceSize(old))
			if len(byKey) == 0 {
				delete(st.objects, ref.Kind)
			}
		}
	}
}

// MaxExtraKinds bounds the kinds besides inventory.Kinds that the hub
// keeps of one cluster: each costs a map the byte count doesn't see, and
// an agent could otherwise name one per object.
const MaxExtraKinds = 50

// holds says whether st, which holds no objects of kind yet, may keep
// some: one of inventory.Kinds, or one the agent says it watches
// (TETHER_INVENTORY_KINDS_EXTRA) while it holds fewer than MaxExtraKinds
// others, but never Secrets, whatever an agent sends.
func (st *state) holds(kind string) bool {
	if kind == "secrets" {
		return false
	}
	if _, known := inventory.LookupKind(kind); known {
		return true
	}
	if !slices.ContainsFunc(st.kinds, func(k protocol.KindState) bool { return k.Kind == kind }) {
		return false
	}
	extra := 0
	for k := range st.objects {
		if _, known := inventory.LookupKind(k); !known {
			extra++
		}
	}
	return extra < MaxExtraKinds
}

// charge counts grows more bytes (fewer, when negative) to st, and reports
// whether it may hold them: always when it shrinks, and when it grows, if
// its store's bounds leave room, or without a store, maxBytes (zero:
// DefaultClusterMaxBytes).
func (st *state) charge(grows int) bool {
	if st.store != nil {
		return st.store.chargeLocked(st, grows)
	}
	limit := st.maxBytes
	if limit == 0 {
		limit = DefaultClusterMaxBytes
	}
	if grows > 0 && st.bytes+grows > limit {
		return false
	}
	st.bytes += grows
	return true
}

func key(namespace, name string) string { return namespace + "/" + name }

// Forget drops a cluster's state: it left the agents list.
func (s *Store) Forget(cluster string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropClusterLocked(cluster)
	delete(s.clusters, cluster)
	delete(s.held, cluster)
	s.ends[cluster]++
}

// Query selects resources. Kind is required; the rest narrow it.
type Query struct {
	Kind      string
	Namespace string          // "" for every namespace
	Selector  labels.Selector // nil for everything
	Ready     *bool           // nil for either
}

// Allow says whether the person asking may list kind in namespace ("" for a
// cluster-scoped kind). It is asked once per namespace that has matches, in
// the order of their names.
type Allow func(kind, namespace string) bool

// Item is one resource in an answer, with its cluster.
type Item struct {
	Cluster string `json:"cluster"`
	protocol.Resource
}

// Select returns the resources of cluster matching q that allow lets
// through, sorted by namespace and name, and whether the store has any
// inventory for cluster. allow is asked without the store's lock held: it
// may ask the cluster.
func (s *Store) Select(cluster string, q Query, allow Allow) ([]Item, bool) {
	s.mu.RLock()
	st := s.clusters[cluster]
	if st == nil {
		s.mu.RUnlock()
		return nil, false
	}
	var out []Item
	for _, res := range st.objects[q.Kind] {
		if q.Namespace != "" && res.Namespace != q.Namespace {
			continue
		}
		if q.Ready != nil && res.Ready != *q.Ready {
			continue
		}
		if q.Selector != nil && !q.Selector.Matches(labels.Set(res.Labels)) {
			continue
		}
		out = append(out, Item{Cluster: cluster, Resource: *res})
	}
	s.mu.RUnlock()

	// Sorted before allow is asked, so that when it can ask about only
	// so many namespaces (the hub bounds its access reviews), the same
	// ones are asked each time.
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	allowed := map[string]bool{}
	kept := out[:0]
	for _, it := range out {
		ok, asked := allowed[it.Namespace]
		if !asked {
			ok = allow(q.Kind, it.Namespace)
			allowed[it.Namespace] = ok
		}
		if ok {
			kept = append(kept, it)
		}
	}
	return kept, true
}

// Summary is a cluster's inventory in numbers (SPEC section 4). A count is
// nil when the agent doesn't watch its kind.
type Summary struct {
	NodesReady    *int `json:"nodesReady,omitempty"`
	NodesTotal    *int `json:"nodesTotal,omitempty"`
	PodsNotReady  *int `json:"podsNotReady,omitempty"`
	AppsOutOfSync *int `json:"appsOutOfSync,omitempty"`
}

// Info is what the store knows of a cluster's inventory as a whole.
type Info struct {
	Summary           Summary
	Kinds             []protocol.KindState
	GatewayTieBreaker string
	Updated           time.Time
	// Truncated is true when the cluster sent more than MaxObjects objects,
	// or more bytes than the store keeps of it, and the hub left some out.
	Truncated bool
	// TooLarge, when set, says why the hub keeps none of the cluster's
	// inventory: it took more than its share of the hub's memory.
	TooLarge string
}

// Info returns cluster's summary and kind states, and whether there is any
// inventory for it.
func (s *Store) Info(cluster string) (Info, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	st := s.clusters[cluster]
	if st == nil {
		return Info{}, false
	}
	info := Info{Kinds: st.kinds, GatewayTieBreaker: st.tieBreaker, Updated: st.updated, Truncated: st.truncated, TooLarge: st.tooLarge, Summary: st.summary()}
	return info, true
}

// summary returns st's counts, counted once per change. Each call gets
// numbers of its own. The store's read lock is held.
func (st *state) summary() Summary {
	st.countMu.Lock()
	defer st.countMu.Unlock()
	if st.counted == nil {
		st.counted = st.countAll()
	}
	own := func(n *int) *int {
		if n == nil {
			return nil
		}
		m := *n
		return &m
	}
	c := st.counted
	return Summary{NodesReady: own(c.NodesReady), NodesTotal: own(c.NodesTotal), PodsNotReady: own(c.PodsNotReady), AppsOutOfSync: own(c.AppsOutOfSync)}
}

// countAll counts st's nodes ready and in all, pods not ready, and
// applications out of sync or unwell: nil for a kind it doesn't watch.
func (st *state) countAll() *Summary {
	count := func(kind string, match func(*protocol.Resource) bool) *int {
		if !st.watches(kind) {
			return nil
		}
		n := 0
		for _, r := range st.objects[kind] {
			if match(r) {
				n++
			}
		}
		return &n
	}
	return &Summary{
		NodesTotal:   count("nodes", func(*protocol.Resource) bool { return true }),
		NodesReady:   count("nodes", func(r *protocol.Resource) bool { return r.Ready }),
		PodsNotReady: count("pods", func(r *protocol.Resource) bool { return !r.Ready }),
		AppsOutOfSync: count("applications", func(r *protocol.Resource) bool {
			// As the cluster page marks them: Degraded and Missing are unwell.
			return r.Sync != "Synced" || r.Health == "Degraded" || r.Health == "Missing"
		}),
	}
}

// watches reports whether the agent watches kind in at least one scope.
func (st *state) watches(kind string) bool {
	for _, k := range st.kinds {
		if k.Kind == kind && k.Error == "" {
			return true
		}
	}
	return false
}
