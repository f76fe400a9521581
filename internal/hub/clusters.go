package hub

import (
	"context"
	"net/http"
	"sort"
	"sync"

	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/inventory/store"
)

// What serves people needs three things of the hub: the way to a cluster's
// API server, which clusters a person may see, and word of what changed.
// They are all here, so that a replica can answer them for clusters whose
// agents another replica holds.

// Upstream is the way to one cluster's API server through one agent
// connection: a new connection of the cluster's agent is another Upstream.
type Upstream interface {
	// Cluster is the cluster's name.
	Cluster() string
	// Host is the API server's host for the request's URL and Host header.
	Host() string
	// ServiceAccountAuth is the Authorization the agent's service account
	// token makes, for requests that impersonate a person.
	ServiceAccountAuth() string
	// RoundTrip sends a request to the API server, TLS checked against
	// the cluster's CA, and follows no redirects. A request whose context
	// is OwnRequest's goes on the hub's own streams.
	RoundTrip(*http.Request) (*http.Response, error)
	// Context is done once the connection is ending.
	Context() context.Context
	// Ceiling is what the agent said of the cluster owner's ceiling
	// (protocol.CeilingOff, …Enforced or …Unavailable), and why it is
	// unavailable, fit to show.
	Ceiling() (ceiling, why string)
	// Halves says which halves the agent runs (SPEC section 9): proxy
	// false means it carries no one's requests, only the hub's own.
	Halves() (proxy, inventory bool)
	// Replica is the hub replica that holds the agent connection, when
	// it is not this one (claims.go); "" for an agent connected here.
	Replica() string
}

// Reach returns the way to cluster name's API server, or nil when no agent
// of it is connected, here or to another replica.
func (h *Hub) Reach(name string) Upstream {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c := h.agents[name]; c != nil {
		return c
	}
	if c := h.claimLocked(name); c != nil {
		return c.Upstream
	}
	return nil
}

// Entry returns cluster name's entry in the agents list in force: who may
// see it (SPEC section 3: its groups, compared with a person's before any
// prefix is added) and how requests reach it (forwardToken).
func (h *Hub) Entry(name string) (fleet.Agent, bool) { return h.cfg.Agents.Lookup(name) }

// Inventory is every cluster's inventory, as their agents report it.
func (h *Hub) Inventory() *store.Store { return h.inventory }

// Subscribe returns a Subscription to the clusters that change: connect,
// status, inventory, or their entry in the agents list. Close it when done.
// Past maxPending names it is told to send everything instead.
func (h *Hub) Subscribe() *Subscription { return h.events.subscribe(maxPending) }

// SubscribeEach is Subscribe for a reader that must hear of each changed
// cluster by name, however many change at once: a replica's claims
// stream, for which everything means building every claim it holds again
// (thousands, each a JSON line), on each storm of agents moving. Its set
// is bounded by the clusters the hub knows of, not by a constant.
func (h *Hub) SubscribeEach() *Subscription { return h.events.subscribe(0) }

// Cluster, Host, ServiceAccountAuth, RoundTrip and Context make agentConn
// an Upstream.

func (c *agentConn) Cluster() string            { return c.name }
func (c *agentConn) Host() string               { return c.apiHost() }
func (c *agentConn) ServiceAccountAuth() string { return c.serviceAccountAuth() }
func (c *agentConn) RoundTrip(r *http.Request) (*http.Response, error) {
	return c.roundTrip(r)
}
func (c *agentConn) Context() context.Context  { return c.ctx }
func (c *agentConn) Ceiling() (string, string) { return c.ceiling, c.ceilingError }
func (c *agentConn) Halves() (bool, bool)      { return !c.proxyOff, !c.inventoryOff }
func (c *agentConn) Replica() string           { return "" }

// broker tells subscribers which clusters changed. A slow stream never
// holds up the hub: changes pile up as a set of names, collapsed per
// stream, and past a bound the stream is just told to send everything.
type broker struct {
	mu   sync.Mutex // guards subs
	subs map[*Subscription]struct{}
}

// Subscription is word of the clusters that changed since it last took
// it: Wake has a value when there is something to Take.
type Subscription struct {
	b    *broker
	wake chan struct{} // has a value when there is something to take

	// limit is the most names kept before all is set instead; 0 for
	// no limit.
	limit int

	mu    sync.Mutex // guards the following
	names map[string]struct{}
	all   bool
}

// maxPending bounds the names a subscriber collects before it is told to
// send everything instead.
const maxPending = 256

func (b *broker) subscribe(limit int) *Subscription {
	s := &Subscription{b: b, limit: limit, wake: make(chan struct{}, 1), names: map[string]struct{}{}}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.subs == nil {
		b.subs = map[*Subscription]struct{}{}
	}
	b.subs[s] = struct{}{}
	return s
}

// changedAll tells every subscriber to send everything.
func (b *broker) changedAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for s := range b.subs {
		s.mu.Lock()
		s.all = true
		s.mu.Unlock()
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// Close ends s: nothing more wakes it.
func (s *Subscription) Close() {
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.subs, s)
}

// changed tells every subscriber that cluster name changed.
func (b *broker) changed(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for s := range b.subs {
		s.mu.Lock()
		if s.limit > 0 && len(s.names) >= s.limit {
			s.all = true
		} else {
			s.names[name] = struct{}{}
		}
		s.mu.Unlock()
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// Take returns the names changed since the last take, sorted, or all=true.
func (s *Subscription) Take() (names []string, all bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.all {
		s.all, s.names = false, map[string]struct{}{}
		return nil, true
	}
	for n := range s.names {
		names = append(names, n)
	}
	s.names = map[string]struct{}{}
	sort.Strings(names)
	return names, false
}

// Wake has a value when something changed since the last Take.
func (s *Subscription) Wake() <-chan struct{} { return s.wake }

// Changed tells the subscribers that cluster name changed, as the hub does
// itself when an agent connects, a probe changes its status or its
// inventory changes.
func (h *Hub) Changed(name string) { h.events.changed(name) }

// ChangedAll tells every subscriber to send everything, as when more
// changed than a subscriber keeps.
func (h *Hub) ChangedAll() { h.events.changedAll() }

// AgentInfo is what the hub knows of a cluster's connected agent.
type AgentInfo struct {
	Remote    string // the agent's address, as the hub sees it
	APIServer string // its API server's address, as its hello said
	// Streams to the API server open now through its tunnel: for people's
	// requests, for the hub's own (probes, access reviews), and all of
	// them but the control and inventory streams.
	PeopleStreams, OwnStreams, APIStreams int
}

// Agent returns what the hub knows of cluster name's agent, if one is
// connected.
func (h *Hub) Agent(name string) (AgentInfo, bool) {
	c := h.connected(name)
	if c == nil {
		return AgentInfo{}, false
	}
	return AgentInfo{Remote: c.remote, APIServer: c.apiServer,
		PeopleStreams: int(c.streams.Load()), OwnStreams: int(c.ownStreams.Load()), APIStreams: c.apiStreams()}, true
}

// CloseIdle closes the connections to cluster name's API server that are
// kept open, unused, for the next request: people's and the hub's own.
func (h *Hub) CloseIdle(name string) {
	if c := h.connected(name); c != nil {
		c.closeIdleConnections()
	}
}
