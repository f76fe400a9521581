// Package kubeproxy is the way people and their tools reach each cluster's
// Kubernetes API through the hub: <base>/clusters/<name>/… is sent to the
// cluster's API server through its agent's tunnel, as the person
// (impersonated), with the answer's redirects kept on the cluster
// (redirect.go), every request in the audit (audit.go; what an exec ran,
// streamaudit.go), each person's open requests bounded and ended when they
// are no longer admitted (open.go), and watches ended cleanly when the hub
// stops (watchend.go).
package kubeproxy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httputil"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/hub"
	"github.com/tetherhq/tether/internal/logging"
	"github.com/tetherhq/tether/internal/recording"
)

// Clusters is what the proxy needs of the clusters the hub keeps
// (*hub.Hub has it).
type Clusters interface {
	// Reach returns the way to cluster name's API server, or nil when
	// none is connected.
	Reach(name string) hub.Upstream
	// Entry returns cluster name's entry in the agents list in force.
	Entry(name string) (fleet.Agent, bool)
	// Cluster returns cluster name's status: when its agent was last
	// heard from says whether it is likely back soon.
	Cluster(name string) (hub.ClusterStatus, bool)
}

// Config is everything a Proxy needs.
type Config struct {
	Logger   *slog.Logger
	Clusters Clusters
	// Auth says who people's requests are from.
	Auth *auth.Authenticator
	// AuthConfig holds the impersonation prefixes.
	AuthConfig auth.Config
	// BasePath is the path prefix the hub is served under, like "/tether";
	// "" or "/" for none.
	BasePath string
	// PublicURL is the hub's address as people open it: redirects into a
	// cluster are rewritten to it, and it is the one Origin let through.
	PublicURL string
	// Audit gets one JSON line per request to a cluster; nil discards them.
	Audit io.Writer
	// Limits bound what one person holds open at once on one cluster
	// (open.go); zero fields take the defaults (DefaultMaxRequests…), and
	// the users list may raise or lower them for its people.
	Limits auth.Limits
	// Recordings, when set, records exec and attach sessions (record.go);
	// nil records none.
	Recordings *recording.Store
	// Registerer takes the proxy's metrics. Nil means a private registry.
	Registerer prometheus.Registerer
}

// Proxy serves people's requests to clusters.
type Proxy struct {
	cfg      Config
	log      *slog.Logger
	metrics  *metrics
	refusals *logging.Limiter
	proxy    *httputil.ReverseProxy

	requests *inflight  // requests to clusters in progress, upgraded sessions included
	sessions sessionSet // the clients' connections of upgraded sessions in progress
	open     openSet    // requests in progress, and event streams, by person (open.go)
	// stopUsers stops the users list's reloads from calling recheckOpen.
	stopUsers func()

	watches Watches // watch answers in flight (watchend.go)

	auditMu   sync.Mutex // serializes audit lines, and guards auditLine
	auditLine []byte     // the last line written, its buffer reused
}

// New returns a Proxy. Call Close when the hub stops.
func New(cfg Config) (*Proxy, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	cfg.BasePath = "/" + strings.Trim(cfg.BasePath, "/")
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	px := &Proxy{
		cfg:      cfg,
		log:      cfg.Logger,
		metrics:  m,
		refusals: logging.NewLimiter(10 * time.Second),
		requests: newInflight(),
	}
	px.proxy = px.newProxy()
	if cfg.Auth != nil {
		// A reload ends what the people it drops hold open (open.go).
		px.stopUsers = cfg.Auth.OnUsersChanged(func() { px.recheckOpen(nil) })
	}
	return px, nil
}

// ClustersChanged ends the requests open on the clusters named whose
// entries in the agents list no longer admit their person (their groups
// changed, or the cluster went), and forgets the metrics of those removed.
func (px *Proxy) ClustersChanged(c fleet.Change) {
	for _, name := range c.Removed {
		px.metrics.forgetCluster(name)
	}
	// Requests open on a cluster whose groups no longer include their
	// person end now, not when they would have.
	changed := slices.Concat(c.Removed, c.Updated)
	px.recheckOpen(func(r *openRequest) bool { return r.cluster != "" && slices.Contains(changed, r.cluster) })
}

// WaitRequests waits until no request to a cluster is in flight, upgraded
// sessions (exec, port-forward) included, or ctx is done. A stopping hub
// calls it after the HTTP server stopped taking requests.
func (px *Proxy) WaitRequests(ctx context.Context) error {
	return px.requests.wait(ctx)
}

// Close stops following the users list and closes the clients' connections
// of upgraded sessions still open: run it once the hub has closed its
// agents' connections, whose end ends the sessions through them but for
// those whose client has stopped reading (their copy to the client waits
// on its socket). Close may be called more than once.
func (px *Proxy) Close() error {
	if px.stopUsers != nil {
		px.stopUsers()
	}
	px.sessions.close()
	return nil
}

// metrics are the proxy's Prometheus metrics.
type metrics struct {
	requests        *prometheus.CounterVec
	requestDuration *prometheus.HistogramVec
	auditErrors     prometheus.Counter // audit lines that couldn't be written
	// limitRefusals counts requests refused as past their person's bound
	// (open.go), by cluster and bound.
	limitRefusals *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_requests_total", Help: "People's requests to clusters, by cluster and answer.",
		}, []string{"cluster", "code"}),
		requestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tether_request_duration_seconds", Help: "How long people's requests to clusters took, to the end of the answer.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 18),
		}, []string{"cluster"}),
		auditErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tether_audit_write_errors_total", Help: "Audit lines the hub couldn't write to TETHER_AUDIT_FILE, and so lost.",
		}),
		limitRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_person_limit_refusals_total", Help: "Requests refused with 429 because their person already held as many open on the cluster as their bound allows (TETHER_MAX_REQUESTS_PER_PERSON, TETHER_MAX_WATCHES_PER_PERSON, TETHER_MAX_SESSIONS_PER_PERSON), by cluster and limit (requests, watches, sessions).",
		}, []string{"cluster", "limit"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.requestDuration, m.auditErrors, m.limitRefusals} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("kubeproxy: %w", err)
		}
	}
	return m, nil
}

// forgetCluster drops the request series of a cluster the agents list no
// longer names. A fleet that adds and removes clusters (short-lived ones for
// tests, say) would otherwise export every name it ever listed until the
// hub restarts: 21 series of its duration histogram each, and a count per
// answer code. A request to it still in flight is counted as "unknown" when
// it ends: audit labels it by the list in force then.
func (m *metrics) forgetCluster(name string) {
	m.requests.DeletePartialMatch(prometheus.Labels{"cluster": name})
	m.requestDuration.DeleteLabelValues(name)
	m.limitRefusals.DeletePartialMatch(prometheus.Labels{"cluster": name})
}
