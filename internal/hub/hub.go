// Package hub keeps the clusters Tether serves: it admits agents over
// WebSockets (agents.go), holds one tunnel per cluster and takes one over
// when a newer agent connects (conn.go), pings them, probes each cluster's
// API server through its tunnel (status.go), and keeps what each cluster's
// agent reports of its state. What serves people (internal/kubeproxy,
// internal/web) reaches the clusters through it: clusters.go.
package hub

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tetherhq/tether/internal/clock"
	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/inventory/store"
	"github.com/tetherhq/tether/internal/logging"
	"github.com/tetherhq/tether/internal/tunnel"
)

// Config is everything a Hub needs. Zero durations take the SPEC defaults.
type Config struct {
	Logger *slog.Logger
	// Agents is the agents list. Nil means the hub has none and refuses
	// every agent with 403.
	Agents *fleet.Agents
	// OwnAgentsOnly says Agents holds only the hub's own agents, for
	// TETHER_FLEET_CLUSTERS: the hub has no agents list, so it refuses
	// every other agent with 403, as with none at all.
	OwnAgentsOnly bool
	// Heartbeat is how often the hub pings each agent.
	Heartbeat time.Duration
	// ReconnectSpread is the window over which agents come back after the
	// hub shuts down; zero means at once (TETHER_RECONNECT_SPREAD_SECONDS
	// may be 0, so zero is not a default here).
	ReconnectSpread time.Duration
	// HelloTimeout bounds the wait for an agent's hello.
	HelloTimeout time.Duration
	// ProbeInterval and ProbeTimeout pace the cluster status probes: one
	// starts every ProbeInterval (10 s), and each gives up after
	// ProbeTimeout (5 s).
	ProbeInterval, ProbeTimeout time.Duration
	// Tunnel tunes the multiplexer. A zero field takes the hub's default
	// (New) or else tunnel.DefaultConfig's; MaxPeerStreams can't be
	// unbounded here.
	Tunnel tunnel.Config
	// Registerer takes the hub's metrics. Nil means a private registry.
	Registerer prometheus.Registerer
	// Clock paces heartbeats, probes and the admission of agents, and
	// dates what the hub records. Nil means the machine's.
	Clock clock.Clock
	// Random returns a number in [0, 1), for the reconnect spread; it must
	// be safe for concurrent use.
	Random func() float64
	// Direct are the API servers of the clusters the hub reaches itself
	// (TETHER_FLEET_CLUSTERS), by cluster. Every other cluster's API server
	// is APIServerName.
	Direct map[string]DirectServer
	// IdleTimeout is how long a connection to an API server stays open,
	// unused, for the next request. Zero means 90 s.
	IdleTimeout time.Duration
	// InventoryMaxBytes bounds every cluster's inventory together, in
	// bytes of heap; zero means store.DefaultMaxBytes.
	InventoryMaxBytes int
	// Replica is this replica's name (TETHER_REPLICA_NAME) when the hub
	// runs as one of several (SPEC section 8); claims.go.
	Replica string
	// MaxStreamsPerAgent bounds the streams to a cluster's API server open
	// at once through its agent for people's requests
	// (TETHER_MAX_STREAMS_PER_AGENT); past it a request is answered 429.
	// The hub's own probes and access reviews have reservedStreams more.
	// Zero means DefaultMaxStreamsPerAgent.
	MaxStreamsPerAgent int
	// OwnDials bounds the hub's own dials to API servers (each a stream,
	// the agent's dial and a TLS handshake) under way at once, over all
	// clusters (turns.go). Zero means DefaultOwnDials.
	OwnDials int
}

// DefaultMaxStreamsPerAgent is TETHER_MAX_STREAMS_PER_AGENT's default. A
// person's request whose client reads slowly holds about 0.5 MiB of the
// hub's memory (its stream's window of 256 KiB, TLS and copy buffers), an
// idle watch about 0.15 MiB: 512 of the first are about 256 MiB, a quarter
// of the chart's 1Gi. It leaves room for tools that hold a watch per kind
// (Argo CD holds 100 and more per cluster) and for the people beside them.
const DefaultMaxStreamsPerAgent = 512

// reservedStreams is how many streams the hub may have open to a cluster
// for its own probes and access reviews, beside people's
// MaxStreamsPerAgent: people at their bound can't make the cluster
// Unreachable, nor the fleet page blind.
const reservedStreams = 16

// Hub admits agents and keeps the state of every cluster: who is
// connected, their status, their inventory. What serves people reaches the
// clusters through it (Reach, Visible, Subscribe).
type Hub struct {
	cfg       Config
	log       *slog.Logger
	clock     clock.Clock
	metrics   *metrics
	refusals  *logging.Limiter
	admission admission     // paces agents' connections
	turns     chan struct{} // a place each for the hub's own dials under way (turns.go)
	replicas  atomic.Int32  // how many replicas share the fleet (admission.go)

	conns  sync.WaitGroup // one per served agent connection
	events broker         // tells subscribers what changed

	inventory *store.Store  // every cluster's inventory
	stop      chan struct{} // closed by Close
	evening   bool          // the balance ticks are asking agents to move; theirs alone

	mu     sync.Mutex // guards the following
	closed bool
	agents map[string]*agentConn // the connected agent of each cluster
	status map[string]*clusterStatus
	lastCA map[string]string // SHA-256 of the CA each agent sent last, to warn when it changes
	// claims are the other replicas' claims of clusters whose agents they
	// hold, by cluster, at most one a replica (claims.go). A slice, not a
	// map by replica: a cluster has one claim but for moments, and a map
	// for each of thousands of clusters cost about 300 bytes apiece.
	claims map[string][]*Claim
	texts  texts // one copy of each text of status and claims
	// retired are the connections of agents that moved to another
	// replica, open while their streams finish (moves.go).
	retired  map[*agentConn]struct{}
	draining bool // Drain was called: agents are refused
	moveAll  bool // Drain asked the agents that can move to move
	// peers are the other replicas whose claims streams gave their
	// account, and whether each drains; load is the spread as last
	// counted; declined, the moves turned away (balance.go).
	peers    map[string]bool
	load     load
	declined map[string]declined
	balancer *timerLoop // with replicas only
}

// goAwayWorkers is how many agents the hub says goodbye to at once.
const goAwayWorkers = 64

// goodbye is a goaway for one agent: why, and for a shutdown, how long the
// agent waits before it connects again.
type goodbye struct {
	c     *agentConn
	kind  goAwayKind
	delay time.Duration
}

// sayGoodbye sends each goaway, waits for the agents to close, and closes
// the connections of those that haven't, from a few goroutines at once,
// and returns when all are done: 10,000 goroutines closing at once left the
// hub thrashing for a minute on 2 cores (docs/decisions/008-performance.md).
// The wait is one goAwayLinger for all of them, from when the last goaway
// went: waited for each in turn, agents that never answer (their network
// gone silent) held a stopping hub 2 s for every 64 of them, past its pod's
// grace with thousands.
func sayGoodbye(clk clock.Clock, gs []goodbye) {
	if len(gs) == 0 {
		return
	}
	sent := make([]sentGoAway, len(gs))
	inParallel(len(gs), func(i int) { sent[i] = gs[i].c.sendGoAway(gs[i].kind, gs[i].delay) })
	expired := make(chan struct{})
	if slices.ContainsFunc(sent, func(g sentGoAway) bool { return g.linger }) {
		t := clk.AfterFunc(goAwayLinger, func() { close(expired) })
		defer t.Stop()
	}
	inParallel(len(sent), func(i int) {
		if sent[i].linger {
			sent[i].wait(expired)
		}
		sent[i].close()
	})
}

// inParallel calls f for each of 0 to n-1, from goAwayWorkers goroutines
// at most, and returns when all calls have.
func inParallel(n int, f func(int)) {
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(n, goAwayWorkers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				f(i)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// New returns a Hub. Call Close to disconnect its agents.
func New(cfg Config) (*Hub, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = 30 * time.Second
	}
	if cfg.HelloTimeout == 0 {
		cfg.HelloTimeout = 10 * time.Second
	}
	if cfg.ProbeInterval == 0 {
		cfg.ProbeInterval = 10 * time.Second
	}
	if cfg.MaxStreamsPerAgent == 0 {
		cfg.MaxStreamsPerAgent = DefaultMaxStreamsPerAgent
	}
	if cfg.ProbeTimeout == 0 {
		cfg.ProbeTimeout = 5 * time.Second
	}
	if cfg.OwnDials == 0 {
		cfg.OwnDials = DefaultOwnDials
	}
	// The hub's own defaults for the tunnel, each for a field left zero;
	// tunnel.Config fills the rest.
	if cfg.Tunnel.StreamCloseTimeout == 0 {
		// The hub closes a stream when it is done with it, never to
		// half-close: its TLS client doesn't. So the agent gets little time
		// to finish its side before the stream is reset, and an API server
		// still sending into a closed stream can't hold it open.
		cfg.Tunnel.StreamCloseTimeout = 10 * time.Second
	}
	if cfg.Tunnel.MaxPeerStreams == 0 {
		// An agent opens its control stream and the inventory's; room for
		// a reconnecting inventory beside them, and no more.
		cfg.Tunnel.MaxPeerStreams = maxAgentStreams
	}
	if cfg.Tunnel.StreamWindow == 0 {
		// Each stream starts at the smallest window, and grows from the
		// session's allowance only while its reader keeps up (decision
		// 023): a person's request whose client reads slowly holds at most
		// 256 KiB here, not 1 MiB (issue 33: 400 slow readers held 484 MB
		// of the hub's heap in their streams' buffers).
		cfg.Tunnel.StreamWindow = 256 << 10
	}
	if err := tunnel.VerifyConfig(cfg.Tunnel); err != nil {
		return nil, fmt.Errorf("hub: %w", err)
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	if cfg.Random == nil {
		cfg.Random = rand.Float64
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = 90 * time.Second
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	h := &Hub{
		cfg:      cfg,
		log:      cfg.Logger,
		clock:    cfg.Clock,
		metrics:  m,
		refusals: logging.NewLimiter(10 * time.Second),
		turns:    make(chan struct{}, cfg.OwnDials),
		agents:   map[string]*agentConn{},
		status:   map[string]*clusterStatus{},
		lastCA:   map[string]string{},
		claims:   map[string][]*Claim{},
		retired:  map[*agentConn]struct{}{},
		peers:    map[string]bool{},
		declined: map[string]declined{},
		stop:     make(chan struct{}),
	}
	h.inventory = store.New(store.Config{MaxBytes: cfg.InventoryMaxBytes, Dropped: h.inventoryDropped})
	streams := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tether_streams_open", Help: "Streams to API servers open now across every agent's tunnel (control and inventory streams not counted).",
	}, h.streamsOpen)
	if err := cfg.Registerer.Register(streams); err != nil {
		return nil, err
	}
	if err := cfg.Registerer.Register(clusterReadiness{h}); err != nil {
		return nil, err
	}
	if cfg.Replica != "" {
		h.balancer = startTimerLoop(h.clock, balanceTick, h.balance)
	}
	return h, nil
}

// maxAgentStreams is how many streams an agent may have open that it opened.
const maxAgentStreams = 4

// spreadDelay is how long an agent the hub sends away at shutdown waits
// before it connects again: a random share of the reconnect spread, so a
// restart under thousands of agents is no storm.
func (h *Hub) spreadDelay() time.Duration {
	return time.Duration(h.cfg.Random() * float64(h.cfg.ReconnectSpread))
}

// Close tells every connected agent the hub is going away, with a random
// delay within the reconnect spread so they don't all come back in the same
// second, closes their connections, and waits for them to be done; then it
// closes the clients' connections of upgraded sessions still open. Run it
// after the HTTP server's Shutdown has let open requests finish. Close may be
// called more than once.
func (h *Hub) Close() error {
	h.mu.Lock()
	if !h.closed {
		close(h.stop)
	}
	h.closed = true
	balancer := h.balancer
	conns := make([]*agentConn, 0, len(h.agents))
	for _, c := range h.agents {
		conns = append(conns, c)
	}
	var retired []*agentConn
	for c := range h.retired {
		retired = append(retired, c)
	}
	h.mu.Unlock()
	if balancer != nil {
		balancer.Stop()
	}
	// The agents that moved have their new connections, and ignore a
	// goaway here: the hub just closes the old ones.
	for _, c := range retired {
		c.end(errors.New("the hub is shutting down"))
	}
	gs := make([]goodbye, len(conns))
	for i, c := range conns {
		gs[i] = goodbye{c, goAwayShutdown, h.spreadDelay()}
	}
	sayGoodbye(h.clock, gs)
	h.conns.Wait()
	return nil
}

// streamsOpen counts the streams open in every tunnel but the control
// streams.
func (h *Hub) streamsOpen() float64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, c := range h.agents {
		n += c.apiStreams()
	}
	return float64(n)
}

// apiStreams counts c's streams to its API server: all but the control
// stream and the inventory's.
func (c *agentConn) apiStreams() int {
	own := 1 // the control stream
	if c.inventoryOpen.Load() {
		own++
	}
	return max(c.sess.NumStreams()-own, 0)
}

// connected returns the agent connected for name, or nil.
func (h *Hub) connected(name string) *agentConn {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.agents[name]
}

// AgentsChanged disconnects the agents that a new agents list removed,
// whose token it revoked, or whose CA it no longer pins. They connect again
// and are refused if they should be. It forgets what the hub kept of the
// clusters removed: inventory, status and request metrics. It tells the
// event streams about every cluster added, removed or changed, so open
// fleet pages show new clusters, new labels and who may see what, and drop
// clusters that are gone; an entry changed in a way people don't see (a
// token, a pinned CA) is announced too, which costs one event. It returns
// once the agents it disconnects are gone; one that doesn't answer holds up
// none of the others.
func (h *Hub) AgentsChanged(c fleet.Change) {
	for _, name := range c.Removed {
		h.inventory.Forget(name)
		h.metrics.forgetCluster(name)
		h.mu.Lock()
		if h.agents[name] == nil { // else once its agent has gone (setStatus)
			delete(h.status, name)
			delete(h.lastCA, name)
		}
		h.mu.Unlock()
	}
	for _, names := range [][]string{c.Added, c.Removed, c.Updated} {
		for _, name := range names {
			h.events.changed(name)
		}
	}
	var gs []goodbye
	drop := slices.Concat(c.Removed, c.TokensRevoked, h.caUnpinned(c.Updated))
	slices.Sort(drop)
	for _, name := range slices.Compact(drop) { // a revoked token and an unpinned CA name one agent twice
		if conn := h.connected(name); conn != nil {
			if conn.admitted() {
				continue // its own token and CA are in force: a rotation dropped the other token
			}
			h.log.Info("The agents list changed: disconnecting an agent", "agent", name)
			gs = append(gs, goodbye{c: conn, kind: goAwayRemoved})
		}
	}
	sayGoodbye(h.clock, gs)
}

// admitted reports whether the agents list in force admits c as it
// connected: its name, its token and the CA it sent.
func (c *agentConn) admitted() bool {
	cur, ok := c.hub.cfg.Agents.Lookup(c.name)
	return ok && cur.AcceptsHash(c.tokenHash) && cur.AcceptsCA(c.caHash)
}

// Closing reports whether Close has been called: the hub takes no more
// agents, and its /readyz says so.
func (h *Hub) Closing() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closed
}
