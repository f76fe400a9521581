// Package server runs a whole hub: it reads its settings (options.go),
// assembles the clusters' registry (internal/hub), the proxy for people
// (internal/kubeproxy) and the web side (internal/web) behind one router,
// serves them on the public port with its certificate reloaded as it
// changes, metrics on their own port, and the clusters the hub reaches
// itself through agents of its own (direct.go); and it shuts them down in
// order (Serve).
package server

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/clock"
	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/hub"
	"github.com/tetherhq/tether/internal/kubeproxy"
	"github.com/tetherhq/tether/internal/peers"
	"github.com/tetherhq/tether/internal/recording"
	"github.com/tetherhq/tether/internal/tunnel"
	"github.com/tetherhq/tether/internal/web"
)

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
	// Clock paces the hub's heartbeats and probes; nil means the machine's.
	Clock clock.Clock
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
	Direct map[string]hub.DirectServer
	// IdleTimeout is how long a connection to an API server stays open,
	// unused, for the next request. Zero means 90 s.
	IdleTimeout time.Duration
	// Limits bound what one person holds open at once on one cluster
	// (open.go); zero fields take the defaults (kubeproxy.DefaultMaxRequests…), and
	// the users list may raise or lower them for its people.
	Limits auth.Limits
	// InventoryMaxBytes bounds every cluster's inventory together, in
	// bytes of heap; zero means store.DefaultMaxBytes.
	InventoryMaxBytes int
	// FormTimeout bounds the wait for the body of a request the hub reads
	// or leaves before it knows who sent it (the sign-in form, a refused
	// request): kubeproxy.CloseUnreadBodies. Zero means 10 s.
	FormTimeout time.Duration
	// MaxStreamsPerAgent bounds the streams to a cluster's API server open
	// at once through its agent for people's requests
	// (TETHER_MAX_STREAMS_PER_AGENT); past it a request is answered 429.
	// The hub's own probes and access reviews have reservedStreams more.
	// Zero means hub.DefaultMaxStreamsPerAgent.
	MaxStreamsPerAgent int
	// Replica is this replica's name when the hub is one of several
	// (TETHER_REPLICA_NAME); "" for a hub on its own.
	Replica string
	// Members are the other replicas, when the hub is one of several:
	// the peer link reaches their clusters (internal/peers). Nil for a
	// hub on its own.
	Members peers.Membership
	// Recordings, when set, records exec and attach sessions; nil records
	// none. RecordingViewers are the groups who see everyone's.
	Recordings       *recording.Store
	RecordingViewers []string
}

// Hub is a whole hub: the registry of clusters, the proxy for people, the
// web side, and the router between them.
type Hub struct {
	cfg      Config
	registry *hub.Hub
	proxy    *kubeproxy.Proxy
	web      *web.Web
	peers    *peers.Peers // nil for a hub on its own
	// draining is set while a stopping hub waits out its drain delay
	// (Options.DrainDelay): its /readyz answers 503.
	draining atomic.Bool
}

// New assembles a Hub. Call Close to disconnect its agents.
func New(cfg Config) (*Hub, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	if cfg.FormTimeout == 0 {
		cfg.FormTimeout = 10 * time.Second
	}
	if cfg.ProbeTimeout == 0 {
		cfg.ProbeTimeout = 5 * time.Second
	}
	cfg.BasePath = "/" + strings.Trim(cfg.BasePath, "/")
	registry, err := hub.New(hub.Config{
		Logger:             cfg.Logger,
		Agents:             cfg.Agents,
		OwnAgentsOnly:      cfg.OwnAgentsOnly,
		Heartbeat:          cfg.Heartbeat,
		ReconnectSpread:    cfg.ReconnectSpread,
		HelloTimeout:       cfg.HelloTimeout,
		ProbeInterval:      cfg.ProbeInterval,
		ProbeTimeout:       cfg.ProbeTimeout,
		Tunnel:             cfg.Tunnel,
		Registerer:         cfg.Registerer,
		Clock:              cfg.Clock,
		Random:             cfg.Random,
		Direct:             cfg.Direct,
		IdleTimeout:        cfg.IdleTimeout,
		InventoryMaxBytes:  cfg.InventoryMaxBytes,
		MaxStreamsPerAgent: cfg.MaxStreamsPerAgent,
		Replica:            cfg.Replica,
	})
	if err != nil {
		return nil, err
	}
	h := &Hub{cfg: cfg, registry: registry}
	if cfg.Auth == nil {
		if cfg.Members != nil {
			h.peers = peers.New(peers.Config{Logger: cfg.Logger, Hub: registry, Members: cfg.Members})
		}
		return h, nil
	}
	h.proxy, err = kubeproxy.New(kubeproxy.Config{
		Logger:     cfg.Logger,
		Clusters:   registry,
		Auth:       cfg.Auth,
		AuthConfig: cfg.AuthConfig,
		BasePath:   cfg.BasePath,
		PublicURL:  cfg.PublicURL,
		Audit:      cfg.Audit,
		Limits:     cfg.Limits,
		Registerer: cfg.Registerer,
		Recordings: cfg.Recordings,
	})
	if err != nil {
		registry.Close()
		return nil, err
	}
	var carrier web.Replicas
	if cfg.Members != nil {
		// Sign-outs and the users list hold on every replica: what one
		// takes in, it tells the others (decision 034).
		h.peers = peers.New(peers.Config{Logger: cfg.Logger, Hub: registry, Members: cfg.Members,
			People: peers.PeopleConfig{Auth: cfg.Auth, SignedOut: h.proxy.SignedOut}})
		carrier = h.peers
	}
	h.web = web.New(web.Config{
		Logger:                 cfg.Logger,
		Clusters:               registry,
		Proxy:                  h.proxy,
		Auth:                   cfg.Auth,
		AuthConfig:             cfg.AuthConfig,
		BasePath:               cfg.BasePath,
		PublicURL:              cfg.PublicURL,
		KubeconfigCA:           cfg.KubeconfigCA,
		EventsKeepAlive:        cfg.EventsKeepAlive,
		AccessTTL:              cfg.AccessTTL,
		AccessReviewsPerQuery:  cfg.AccessReviewsPerQuery,
		AccessReviewsPerPerson: cfg.AccessReviewsPerPerson,
		ReviewTimeout:          cfg.ProbeTimeout,
		FormTimeout:            cfg.FormTimeout,
		Replicas:               carrier,
		Recordings:             cfg.Recordings,
		RecordingViewers:       cfg.RecordingViewers,
	})
	return h, nil
}

// AgentsChanged takes a new agents list in: the registry disconnects the
// agents it no longer admits, the proxy ends the requests whose person it
// no longer admits, and the web side forgets the clusters removed.
func (h *Hub) AgentsChanged(c fleet.Change) {
	if h.proxy != nil {
		h.proxy.ClustersChanged(c)
		h.web.ClustersChanged(c)
	}
	h.registry.AgentsChanged(c)
}

// Drain asks the agents held here to move to the other replicas, and tells
// those that this one takes no more.
func (h *Hub) Drain() {
	if h.peers != nil {
		h.peers.Drain()
	}
	h.registry.Drain()
}

// EndWatches ends every watch at its next event's end and the fleet pages'
// event streams now: a stopping hub calls it as it stops taking requests.
func (h *Hub) EndWatches() {
	if h.peers != nil {
		h.peers.EndWatches()
	}
	if h.proxy != nil {
		h.proxy.EndWatches()
		h.web.EndStreams()
	}
}

// WaitRequests waits until no request to a cluster is in flight, upgraded
// sessions included, or ctx is done.
func (h *Hub) WaitRequests(ctx context.Context) error {
	if h.proxy == nil {
		return nil
	}
	return h.proxy.WaitRequests(ctx)
}

// Close sends the agents away and waits for them, then closes the clients'
// connections of upgraded sessions still open (kubeproxy.Proxy.Close). Run
// it after the HTTP server's Shutdown has let open requests finish. Close
// may be called more than once.
func (h *Hub) Close() error {
	err := h.registry.Close()
	if h.peers != nil {
		// Once the agents are gone: until then, moving agents and the
		// requests that follow them need the others.
		h.peers.Close()
	}
	if h.proxy != nil {
		h.proxy.Close()
	}
	return err
}
