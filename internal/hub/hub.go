// Package hub is Tether's hub: it admits agents over WebSockets, keeps one
// tunnel per cluster, probes each cluster through its tunnel, and serves
// people and their tools: the proxy to each cluster's API server, the fleet
// page and its APIs, kubeconfigs and audit. This file holds the Hub and its
// lifetime; agents.go admits agents, conn.go serves one, status.go probes.
package hub

import (
	"context"
	"io"
	"net/http/httputil"

	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/inventory/store"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tetherhq/tether/internal/fleet"
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
	// BasePath is the path prefix the hub is served under, like "/tether";
	// "" or "/" for none.
	BasePath string
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
	// AccessTTL is how long the cluster's answer to "may this person list
	// this kind here?" is kept (SPEC section 5). Zero means 60 s.
	AccessTTL time.Duration
	// AccessReviewsPerQuery bounds the access reviews in namespaces that
	// one query sends, across the clusters it covers; each cluster's
	// review of every namespace at once is not counted. Zero means 500.
	AccessReviewsPerQuery int
	// AccessReviewsPerPerson bounds the access reviews one person's
	// queries send to one cluster each AccessTTL. Zero means 1000.
	AccessReviewsPerPerson int
	// Tunnel tunes the multiplexer. A zero field takes the hub's default
	// (New) or else tunnel.DefaultConfig's; MaxPeerStreams can't be
	// unbounded here.
	Tunnel tunnel.Config
	// EventsKeepAlive is how often an idle event stream (/api/events) gets
	// a comment, which proxies need to keep it open, and how often it asks
	// again who it is for; zero means 25 s.
	EventsKeepAlive time.Duration
	// Registerer takes the hub's metrics. Nil means a private registry.
	Registerer prometheus.Registerer
	// Random returns a number in [0, 1), for the reconnect spread and the
	// Retry-After of agents held back by the pace; it must be safe for
	// concurrent use.
	Random func() float64
	// Auth says who people's requests are from. Nil means the hub serves
	// agents only: no /clusters or /api/kubeconfig.
	Auth *auth.Authenticator
	// AuthConfig holds the impersonation prefixes.
	AuthConfig auth.Config
	// PublicURL is the hub's address as people open it, for kubeconfigs.
	PublicURL string
	// KubeconfigCA, when set, returns the PEM CA that kubeconfigs tell
	// kubectl to trust for the hub, or nil: a hub with a certificate from a
	// private CA has one, and it may change as the certificate is renewed.
	KubeconfigCA func() []byte
	// Audit gets one JSON line per request to a cluster; nil discards them.
	Audit io.Writer
	// Direct are the API servers of the clusters the hub reaches itself
	// (TETHER_FLEET_CLUSTERS), by cluster. Every other cluster's API server
	// is APIServerName.
	Direct map[string]DirectServer
	// IdleTimeout is how long a connection to an API server stays open,
	// unused, for the next request. Zero means 90 s.
	IdleTimeout time.Duration
	// Limits bound what one person holds open at once on one cluster
	// (open.go); zero fields take the defaults (DefaultMaxRequests…), and
	// the users list may raise or lower them for its people.
	Limits auth.Limits
	// InventoryMaxBytes bounds every cluster's inventory together, in
	// bytes of heap; zero means store.DefaultMaxBytes.
	InventoryMaxBytes int
	// FormTimeout bounds the wait for the body of a request the hub reads
	// or leaves before it knows who sent it (the sign-in form, a refused
	// request): closeUnreadBodies. Zero means 10 s.
	FormTimeout time.Duration
	// MaxStreamsPerAgent bounds the streams to a cluster's API server open
	// at once through its agent for people's requests
	// (TETHER_MAX_STREAMS_PER_AGENT); past it a request is answered 429.
	// The hub's own probes and access reviews have reservedStreams more.
	// Zero means DefaultMaxStreamsPerAgent.
	MaxStreamsPerAgent int
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

// Hub admits agents and keeps the state of every cluster.
type Hub struct {
	cfg       Config
	log       *slog.Logger
	metrics   *metrics
	refusals  *limiter
	admission admission // paces agents' connections

	proxy *httputil.ReverseProxy

	conns    sync.WaitGroup // one per served agent connection
	requests *inflight      // requests to clusters in progress, upgraded sessions included
	sessions sessionSet     // the clients' connections of upgraded sessions in progress
	open     openSet        // requests in progress, and event streams, by person (open.go)
	// stopUsers stops the users list's reloads from calling recheckOpen.
	stopUsers func()

	watchMu       sync.Mutex              // guards the following
	watches       map[*watchBody]struct{} // watch answers in flight (watchend.go)
	endingWatches bool                    // EndWatches was called
	stopping      chan struct{}           // closed by EndWatches: the fleet pages' event streams end

	auditMu   sync.Mutex // serializes audit lines, and guards auditLine
	auditLine []byte     // the last line written, its buffer reused
	events    broker     // tells /api/events streams what changed

	inventory *store.Store // every cluster's inventory
	access    *accessCache // what people may list, per cluster (SPEC section 5)

	mu     sync.Mutex // guards the following
	closed bool
	agents map[string]*agentConn // the connected agent of each cluster
	status map[string]*clusterStatus
	lastCA map[string]string // SHA-256 of the CA each agent sent last, to warn when it changes
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

// sayGoodbye sends each goaway and closes its connection, from a few
// goroutines at once, and returns when all are done. Each goaway may wait
// seconds for an agent that doesn't answer, so one such agent must not hold
// up the others; and 10,000 goroutines closing at once left the hub
// thrashing for a minute on 2 cores (docs/decisions/008-performance.md).
func sayGoodbye(gs []goodbye) {
	var wg sync.WaitGroup
	next := make(chan goodbye)
	for range min(len(gs), goAwayWorkers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for g := range next {
				g.c.goAway(g.kind, g.delay)
			}
		}()
	}
	for _, g := range gs {
		next <- g
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
	if cfg.AccessTTL == 0 {
		cfg.AccessTTL = 60 * time.Second
	}
	if cfg.AccessReviewsPerQuery == 0 {
		cfg.AccessReviewsPerQuery = defaultReviewsPerQuery
	}
	if cfg.AccessReviewsPerPerson == 0 {
		cfg.AccessReviewsPerPerson = defaultReviewsPerPerson
	}
	if cfg.EventsKeepAlive == 0 {
		cfg.EventsKeepAlive = 25 * time.Second
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
	if cfg.Random == nil {
		cfg.Random = rand.Float64
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = 90 * time.Second
	}
	if cfg.FormTimeout == 0 {
		cfg.FormTimeout = 10 * time.Second
	}
	cfg.BasePath = "/" + strings.Trim(cfg.BasePath, "/")
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	h := &Hub{
		cfg:      cfg,
		log:      cfg.Logger,
		metrics:  m,
		refusals: newLimiter(10 * time.Second),
		agents:   map[string]*agentConn{},
		status:   map[string]*clusterStatus{},
		lastCA:   map[string]string{},
		requests: newInflight(),
		watches:  map[*watchBody]struct{}{},
		stopping: make(chan struct{}),
		access:   newAccessCache(cfg.AccessTTL, cfg.AccessReviewsPerPerson),
	}
	h.inventory = store.New(store.Config{MaxBytes: cfg.InventoryMaxBytes, Dropped: h.inventoryDropped})
	h.proxy = h.newProxy()
	if cfg.Auth != nil {
		// A reload ends what the people it drops hold open (open.go).
		h.stopUsers = cfg.Auth.OnUsersChanged(func() { h.recheckOpen(nil) })
	}
	streams := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tether_streams_open", Help: "Streams to API servers open now across every agent's tunnel (control and inventory streams not counted).",
	}, h.streamsOpen)
	if err := cfg.Registerer.Register(streams); err != nil {
		return nil, err
	}
	if err := cfg.Registerer.Register(clusterReadiness{h}); err != nil {
		return nil, err
	}
	return h, nil
}

// Handler serves the hub's public endpoints below its base path, and
// /healthz and /readyz at the root too, where Kubernetes probes them.
func (h *Hub) Handler() http.Handler {
	mux := http.NewServeMux()
	base := strings.TrimSuffix(h.cfg.BasePath, "/")
	mux.HandleFunc(base+"/api/agent", h.serveAgent)
	if h.cfg.Auth != nil {
		mux.HandleFunc(base+"/clusters/{cluster}/{path...}", h.serveCluster)
		mux.HandleFunc(base+"/clusters/{cluster}", h.serveCluster)
		mux.HandleFunc("GET "+base+"/api/kubeconfig", h.serveKubeconfig)
		mux.HandleFunc("GET "+base+"/api/clusters", h.serveClusters)
		mux.HandleFunc("GET "+base+"/api/clusters/{cluster}", h.serveClusterJSON)
		mux.HandleFunc("GET "+base+"/api/clusters/{cluster}/resources", h.serveResources)
		mux.HandleFunc("GET "+base+"/api/clusters/{cluster}/gateways", h.serveGateways)
		mux.HandleFunc("GET "+base+"/api/resources", h.serveFleetResources)
		mux.HandleFunc("GET "+base+"/api/events", h.serveEvents)
		mux.HandleFunc("GET "+base+"/{$}", h.servePage)
		mux.HandleFunc("GET "+base+"/cluster/{cluster}", h.serveClusterPage)
		mux.HandleFunc("POST "+base+"/login", h.serveLogin)
		// The address a failed sign-in leaves in the address bar, loaded
		// again: the sign-in form is on the fleet page.
		mux.Handle("GET "+base+"/login", http.RedirectHandler(h.pageBase(), http.StatusSeeOther))
		mux.HandleFunc("POST "+base+"/logout", h.serveLogout)
		if h.cfg.Auth.OIDCEnabled() {
			mux.HandleFunc("GET "+base+"/login/oidc", h.serveOIDCLogin)
			mux.HandleFunc("GET "+base+"/login/oidc/callback", h.serveOIDCCallback)
		}
		mux.Handle("GET "+base+"/static/", http.StripPrefix(base+"/static/", staticFiles()))
		mux.HandleFunc(base+"/api/", h.serveNoAPI)
		// kubectl 1.33 and older drop the whole path of the server, base
		// path included, from --raw requests.
		for _, p := range []string{"/api", "/api/v1", "/api/v1/", "/apis", "/apis/", "/version", "/openapi/"} {
			mux.HandleFunc(base+p, h.serveNoCluster)
			if base != "" {
				mux.HandleFunc(p, h.serveNoCluster)
			}
		}
	}
	ok := func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) }
	mux.HandleFunc("GET /healthz", ok)
	mux.HandleFunc("GET /readyz", h.serveReady)
	if base != "" {
		mux.HandleFunc("GET "+base+"/healthz", ok)
		mux.HandleFunc("GET "+base+"/readyz", h.serveReady)
	}
	return h.closeUnreadBodies(mux)
}

// closeUnreadBodies bounds the wait for the body of an HTTP/1 request,
// and has its connection closed after the answer. net/http reads what a
// handler left of a body (up to 256 KiB), before it sends the answer and
// again once the handler is done, with no deadline: the hub's server has
// none, as watches and exec sessions last for hours. So a client that
// declared a body and never sent it held its connection and goroutine for
// as long as it liked, no sign-in needed. serveCluster takes both off when
// it forwards the body of a request whose person it knows. HTTP/2 has no
// such wait, and its Connection: close would end the client's other
// streams.
func (h *Hub) closeUnreadBodies(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if bodyBounded(r) {
			w.Header().Set("Connection", "close")
			http.NewResponseController(w).SetReadDeadline(time.Now().Add(h.cfg.FormTimeout))
		}
		next.ServeHTTP(w, r)
	})
}

// bodyBounded says whether closeUnreadBodies bounds r's body: an HTTP/1
// request that has one.
func bodyBounded(r *http.Request) bool { return r.ProtoMajor == 1 && r.ContentLength != 0 }

// serveNoCluster answers a Kubernetes API path that names no cluster.
// kubectl 1.33 and older send `get --raw` paths from the server's root,
// leaving out the kubeconfig's /clusters/<name>
// (kubernetes/kubernetes#131165): the answer says so, as a Status kubectl
// shows, instead of net/http's bare 404.
func (h *Hub) serveNoCluster(w http.ResponseWriter, r *http.Request) {
	base := strings.TrimSuffix(h.cfg.BasePath, "/")
	writeStatus(w, http.StatusNotFound, "NotFound", fmt.Sprintf(
		"Tether serves each cluster's Kubernetes API under %s/clusters/<name>, and %s names no cluster. "+
			"kubectl 1.33 and older leave the kubeconfig's /clusters/<name> out of --raw paths: "+
			"use kubectl 1.34 or later, or give the whole path, like --raw %s/clusters/<name>%s",
		base, r.URL.Path, base, strings.TrimPrefix(r.URL.Path, base)))
}

// serveNoAPI answers a request under /api/ that none of the hub's
// endpoints takes: a mistyped path, a cluster's name left out
// (/api/clusters/), or a method other than GET, the only one they take.
func (h *Hub) serveNoAPI(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, fmt.Sprintf("Tether's API answers GET only, not %s.", r.Method), http.StatusMethodNotAllowed)
		return
	}
	base := strings.TrimSuffix(h.cfg.BasePath, "/")
	http.Error(w, fmt.Sprintf("Tether has no API at %s. Its API: %s/api/clusters, %s/api/clusters/<name>, "+
		"%s/api/clusters/<name>/resources?kind=…, %s/api/clusters/<name>/gateways?host=…, %s/api/resources?kind=…, "+
		"%s/api/events and %s/api/kubeconfig.", r.URL.Path, base, base, base, base, base, base, base), http.StatusNotFound)
}

func (h *Hub) serveReady(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	closed := h.closed
	h.mu.Unlock()
	if closed {
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	}
	w.Write([]byte("ok\n"))
}

// spreadDelay is how long an agent the hub sends away at shutdown waits
// before it connects again: a random share of the reconnect spread, so a
// restart under thousands of agents is no storm.
// maxAgentStreams is how many streams an agent may have open that it opened.
const maxAgentStreams = 4

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
	if h.stopUsers != nil {
		h.stopUsers()
	}
	h.mu.Lock()
	h.closed = true
	conns := make([]*agentConn, 0, len(h.agents))
	for _, c := range h.agents {
		conns = append(conns, c)
	}
	h.mu.Unlock()
	gs := make([]goodbye, len(conns))
	for i, c := range conns {
		gs[i] = goodbye{c, goAwayShutdown, h.spreadDelay()}
	}
	sayGoodbye(gs)
	h.conns.Wait()
	// The tunnels' end ends the upgraded sessions through them, but for
	// those whose client has stopped reading: their copy to the client
	// waits on its socket. Their clients' connections are closed too.
	h.sessions.close()
	return nil
}

// WaitRequests waits until no request to a cluster is in flight, upgraded
// sessions (exec, port-forward) included, or ctx is done. A stopping hub
// calls it after the HTTP server stopped taking requests, before Close.
func (h *Hub) WaitRequests(ctx context.Context) error {
	return h.requests.wait(ctx)
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
		h.access.forget(name)
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
	// Requests open on a cluster whose groups no longer include their
	// person end now, not when they would have.
	changed := slices.Concat(c.Removed, c.Updated)
	h.recheckOpen(func(r *openRequest) bool { return r.cluster != "" && slices.Contains(changed, r.cluster) })
	var gs []goodbye
	drop := slices.Concat(c.Removed, c.TokensRevoked, h.caUnpinned(c.Updated))
	slices.Sort(drop)
	for _, name := range slices.Compact(drop) { // a revoked token and an unpinned CA name one agent twice
		if conn := h.connected(name); conn != nil {
			if conn.admitted() {
				continue // its own token and CA are in force: a rotation dropped the other token
			}
			h.log.Info(fmt.Sprintf("The agents list changed for %q: disconnecting its agent", name), "agent", name)
			gs = append(gs, goodbye{c: conn, kind: goAwayRemoved})
		}
	}
	sayGoodbye(gs)
}

// admitted reports whether the agents list in force admits c as it
// connected: its name, its token and the CA it sent.
func (c *agentConn) admitted() bool {
	cur, ok := c.hub.cfg.Agents.Lookup(c.name)
	return ok && cur.AcceptsHash(c.tokenHash) && cur.AcceptsCA(c.caHash)
}
