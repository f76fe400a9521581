package inventory

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tetherhq/tether/internal/protocol"
	"k8s.io/apimachinery/pkg/labels"
)

// Store is the hub's copy of every cluster's inventory, in memory. Each
// cluster's state is replaced as a whole by each complete snapshot, so a
// reconnected agent leaves no ghosts of objects deleted while it was away.
type Store struct {
	mu       sync.RWMutex // guards clusters and everything in them, and ends
	clusters map[string]*state
	// ends counts each cluster's calls to Forget and End: a Receiver made
	// before the last of them changes nothing, however late its Updates.
	ends map[string]uint64
}

// MaxObjects bounds the objects the hub keeps of one cluster, so an agent
// can't make the hub hold more than a very large cluster's worth. Past it,
// new objects are left out (changes to those kept still apply) and the
// cluster's state says so.
const MaxObjects = 1_000_000

// MaxBytes bounds the bytes of summaries the hub keeps of one cluster, as
// summarySize counts them, for the same reason: a summary's names are
// bounded, but its labels, conditions and hosts only by the message they
// come in (1 MiB), so a million objects could hold far more than any real
// cluster's.
// A summary is a few hundred bytes; the largest clusters (150,000 pods)
// need well under this. Past it, new objects and growing changes are left
// out, as past MaxObjects.
const MaxBytes = 256 << 20

// state is one cluster's inventory.
type state struct {
	objects    map[string]map[string]*protocol.Resource // kind → "namespace/name" → summary
	count      int                                      // objects in all kinds
	bytes      int                                      // their summarySize, together
	maxBytes   int                                      // 0: MaxBytes (tests set less)
	truncated  bool                                     // some were left out: over MaxObjects or MaxBytes
	kinds      []protocol.KindState
	tieBreaker string
	updated    time.Time

	// counted is the Summary as last counted, nil since the state changed:
	// every open page asks for it at each change, and counting walks every
	// node, pod and application. Info fills it under the store's read lock,
	// so it has a lock of its own.
	countMu sync.Mutex
	counted *Summary
}

// NewStore returns an empty Store.
func NewStore() *Store {
	return &Store{clusters: map[string]*state{}, ends: map[string]uint64{}}
}

// Receiver applies one connection's Updates to the store's state of one
// cluster. It is not safe for concurrent use: each connection has its own.
type Receiver struct {
	store   *Store
	cluster string
	end     uint64 // the cluster's ends when it was made
	pending *state // a snapshot being received
	live    bool   // a snapshot completed: Updates now change the store
}

// Receiver returns a Receiver for a new connection of cluster.
func (s *Store) Receiver(cluster string) *Receiver {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return &Receiver{store: s, cluster: cluster, end: s.ends[cluster]}
}

// End makes the Receivers of cluster made so far change nothing more, and
// keeps its state: its agent was taken over, and the next connection's
// snapshot replaces it.
func (s *Store) End(cluster string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ends[cluster]++
}

// Apply takes one Update. It reports whether the store changed.
func (r *Receiver) Apply(u *protocol.Update, now time.Time) bool {
	if u.Snapshot {
		r.pending = &state{objects: map[string]map[string]*protocol.Resource{}, tieBreaker: u.GatewayTieBreaker}
		r.live = false
	}
	if r.pending != nil {
		r.pending.apply(u)
		if !u.Complete {
			return false
		}
		r.pending.updated = now
		r.store.mu.Lock()
		ended := r.store.ends[r.cluster] != r.end
		if !ended {
			r.store.clusters[r.cluster] = r.pending
		}
		r.store.mu.Unlock()
		r.pending, r.live = nil, !ended
		return !ended
	}
	if !r.live {
		return false // changes before any snapshot: the agent broke the protocol; ignore them
	}
	r.store.mu.Lock()
	defer r.store.mu.Unlock()
	st := r.store.clusters[r.cluster]
	if st == nil || r.store.ends[r.cluster] != r.end {
		return false // forgotten, or taken over, meanwhile
	}
	st.apply(u)
	st.updated = now
	return true
}

func (st *state) apply(u *protocol.Update) {
	st.counted = nil // apply runs under the store's write lock: no Info counts now
	if u.Kinds != nil {
		st.kinds = u.Kinds
	}
	for i := range u.Upserts {
		res := u.Upserts[i]
		byKey := st.objects[res.Kind]
		if byKey == nil {
			if _, known := LookupKind(res.Kind); !known {
				// No query can ask for it (a newer agent's kind, or a made-up
				// one): holding it would only let an agent fill the hub with
				// kinds that count toward neither MaxObjects nor MaxBytes.
				continue
			}
			byKey = map[string]*protocol.Resource{}
			st.objects[res.Kind] = byKey
		}
		k := key(res.Namespace, res.Name)
		size := summarySize(&res)
		old, ok := byKey[k]
		grows := size
		if ok {
			grows -= summarySize(old)
		}
		limit := st.maxBytes
		if limit == 0 {
			limit = MaxBytes
		}
		if !ok && st.count >= MaxObjects || grows > 0 && st.bytes+grows > limit {
			st.truncated = true
			continue // a kept object keeps its last summary
		}
		if !ok {
			st.count++
		}
		st.bytes += grows
		byKey[k] = &res
	}
	for _, ref := range u.Deletes {
		k := key(ref.Namespace, ref.Name)
		byKey := st.objects[ref.Kind]
		if old, ok := byKey[k]; ok {
			delete(byKey, k)
			st.count--
			st.bytes -= summarySize(old)
			if len(byKey) == 0 {
				delete(st.objects, ref.Kind)
			}
		}
	}
}

// summarySize is about what a summary costs the hub: its strings' bytes, and some
// for each string, map entry and the object itself.
func summarySize(r *protocol.Resource) int {
	const perString, perObject = 16, 256
	n := perObject
	str := func(ss ...string) {
		for _, s := range ss {
			n += perString + len(s)
		}
	}
	str(r.Kind, r.Namespace, r.Name, r.Owner, r.Phase, r.Replicas, r.Version, r.Sync, r.Health)
	for k, v := range r.Labels {
		str(k, v)
	}
	for _, c := range r.Conditions {
		str(c.Type, c.Status, c.Reason, c.Message)
	}
	str(r.Images...)
	str(r.Hosts...)
	return n
}

func key(namespace, name string) string { return namespace + "/" + name }

// Forget drops a cluster's state: it left the agents list.
func (s *Store) Forget(cluster string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.clusters, cluster)
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
	// or MaxBytes of them, and the hub left some out.
	Truncated bool
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
	info := Info{Kinds: st.kinds, GatewayTieBreaker: st.tieBreaker, Updated: st.updated, Truncated: st.truncated, Summary: st.summary()}
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

// ErrNoGateway is returned when no gateway serves a host.
var ErrNoGateway = errors.New("no gateway serves this host")

// ErrHiddenGateway is returned when the gateways that serve a host are all
// in namespaces the person may not list: the answer is theirs to know only
// if they could list it.
var ErrHiddenGateway = errors.New("no gateway you may list serves this host")

// AmbiguousError is returned when several gateways serve a host and no
// tie-breaker picks one of them.
type AmbiguousError struct {
	Host       string
	Candidates []string // namespace/name, sorted: those the person may list
	Hidden     int      // how many more, in namespaces they may not list
	TieBreaker string   // set when it names none of the candidates, to those who may list it
}

func (e *AmbiguousError) Error() string {
	msg := fmt.Sprintf("%d gateways serve %q: %s", len(e.Candidates)+e.Hidden, e.Host, strings.Join(e.Candidates, ", "))
	if e.Hidden > 0 {
		msg += fmt.Sprintf(" and %d you may not list", e.Hidden)
	}
	if e.TieBreaker != "" {
		return msg + fmt.Sprintf("; the tie-breaker %s is none of them", e.TieBreaker)
	}
	return msg + "; set the agent's TETHER_ISTIO_GATEWAY_TIE_BREAKER to the one that should win"
}

// Gateway names the Istio Gateway ("namespace/name") of cluster that serves
// host. An exact host and a wildcard count alike; when several match, the
// agent's tie-breaker decides. The answer is decided over every gateway,
// then shown only if allow lets the person see it: a gateway they may not
// list still serves the host, and one they may list that loses to it
// doesn't. The candidates returned are those they may list.
func (s *Store) Gateway(cluster, host string, allow Allow) (string, []string, error) {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	s.mu.RLock()
	st := s.clusters[cluster]
	var candidates []string
	var tieBreaker string
	if st != nil {
		tieBreaker = st.tieBreaker
		for _, gw := range st.objects["gateways"] {
			for _, h := range gw.Hosts {
				if hostMatches(h, host) {
					candidates = append(candidates, gw.Namespace+"/"+gw.Name)
					break
				}
			}
		}
	}
	s.mu.RUnlock()
	// Ask outside the lock: allow may ask the cluster. In order, so that
	// the same are asked each time when it can ask about only so many.
	sort.Strings(candidates)
	var visible []string
	for _, c := range candidates {
		ns, _, _ := strings.Cut(c, "/")
		if allow("gateways", ns) {
			visible = append(visible, c)
		}
	}
	hidden := len(candidates) - len(visible)
	winner := ""
	switch {
	case len(candidates) == 0:
		return "", nil, ErrNoGateway
	case len(visible) == 0:
		return "", nil, ErrHiddenGateway
	case len(candidates) == 1:
		winner = candidates[0]
	case slices.Contains(candidates, tieBreaker):
		winner = tieBreaker
	}
	switch {
	case winner == "":
		if ns, _, _ := strings.Cut(tieBreaker, "/"); tieBreaker != "" && !allow("gateways", ns) {
			tieBreaker = "" // it names a gateway the person may not list
		}
		return "", visible, &AmbiguousError{Host: host, Candidates: visible, Hidden: hidden, TieBreaker: tieBreaker}
	case !slices.Contains(visible, winner):
		return "", nil, ErrHiddenGateway
	}
	return winner, visible, nil
}

// hostMatches reports whether a Gateway's host pattern serves host: "*"
// serves every host, "*.example.com" every name below example.com.
func hostMatches(pattern, host string) bool {
	pattern = strings.ToLower(pattern)
	if pattern == "*" {
		return true
	}
	if suffix, ok := strings.CutPrefix(pattern, "*"); ok {
		return strings.HasSuffix(host, suffix) && len(host) > len(suffix)
	}
	return pattern == host
}
