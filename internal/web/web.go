// Package web is the hub's side for people in a browser and for tools that
// read the fleet: the fleet and cluster pages (page.go), signing in and out
// (session.go), the JSON API and its live events (api.go), each cluster's
// inventory filtered by the person's RBAC (resources.go, access.go), and
// kubeconfigs (kubeconfig.go).
package web

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/clock"
	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/hub"
	"github.com/tetherhq/tether/internal/inventory/store"
	"github.com/tetherhq/tether/internal/kubeproxy"
	"github.com/tetherhq/tether/internal/recording"
)

// Clusters is what the web side needs of the clusters the hub keeps
// (*hub.Hub has it).
type Clusters interface {
	// Reach returns the way to cluster name's API server, or nil when
	// none is connected: access reviews go through it.
	Reach(name string) hub.Upstream
	// Entry returns cluster name's entry in the agents list in force.
	Entry(name string) (fleet.Agent, bool)
	// Clusters and Cluster return the status of the clusters in the
	// agents list; History a cluster's recent changes of status.
	Clusters() []hub.ClusterStatus
	Cluster(name string) (hub.ClusterStatus, bool)
	History(name string) []hub.StatusChange
	// Inventory is every cluster's inventory.
	Inventory() *store.Store
	// InventoryInfo is what is known of a cluster's inventory as a whole,
	// here or, for a cluster another replica holds, from its claim.
	InventoryInfo(name string) (store.Info, bool)
	// Subscribe tells of the clusters that change, for the event streams.
	Subscribe() *hub.Subscription
}

// Config is everything a Web needs. Zero durations take the defaults.
type Config struct {
	Logger   *slog.Logger
	Clusters Clusters
	// Proxy keeps the event streams with people's open requests, so that
	// signing out or leaving the users list ends them.
	Proxy *kubeproxy.Proxy
	// Auth says who people are; AuthConfig holds the impersonation
	// prefixes, for access reviews as the person.
	Auth       *auth.Authenticator
	AuthConfig auth.Config
	// BasePath is the path prefix the hub is served under, like "/tether";
	// "" or "/" for none.
	BasePath string
	// PublicURL is the hub's address as people open it, for kubeconfigs,
	// sign-in redirects and the Origin it takes.
	PublicURL string
	// KubeconfigCA, when set, returns the PEM CA that kubeconfigs tell
	// kubectl to trust for the hub, or nil: a hub with a certificate from a
	// private CA has one, and it may change as the certificate is renewed.
	KubeconfigCA func() []byte
	// EventsKeepAlive is how often an idle event stream (/api/events) gets
	// a comment, which proxies need to keep it open, and how often it asks
	// again who it is for; zero means 25 s.
	EventsKeepAlive time.Duration
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
	// ReviewTimeout bounds one access review. Zero means 5 s.
	ReviewTimeout time.Duration
	// Replicas, when set, carries queries about clusters whose agents
	// other hub replicas hold to those replicas (replicas.go); nil with
	// one hub.
	Replicas Replicas
	// ReplicaTimeout bounds the wait for each cluster's part of another
	// replica's share of a fleet-wide answer: past it, the clusters it
	// has yet to give are left out, and named. Zero means three
	// ReviewTimeouts.
	ReplicaTimeout time.Duration
	// FormTimeout bounds the wait for the sign-in form's body. Zero means
	// 10 s.
	FormTimeout time.Duration
	// Clock is the clusters' timelines' clock and that of `tether login`'s
	// codes (clilogin.go); nil means the real one.
	Clock clock.Clock
	// Recordings, when set, holds the session recordings people may
	// watch (recordings.go); RecordingViewers are the groups who may
	// watch everyone's.
	Recordings       *recording.Store
	RecordingViewers []string
}

// Web serves the pages and the JSON API.
type Web struct {
	cfg    Config
	log    *slog.Logger
	access *accessCache // what people may list, per cluster (SPEC section 5)
	// timelines is each cluster's status over the last day (timeline.go).
	timelines *timelines

	// stopping is done once the hub stops: the event streams end, and
	// EventSource connects again, to the next hub.
	stopping context.Context
	stop     context.CancelFunc

	// cli is what `tether login`'s sign-ins keep here (clilogin.go,
	// device.go), made on first use.
	cliOnce sync.Once
	cli     *cliState
}

// New returns a Web.
func New(cfg Config) *Web {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.EventsKeepAlive == 0 {
		cfg.EventsKeepAlive = 25 * time.Second
	}
	if cfg.AccessTTL == 0 {
		cfg.AccessTTL = 60 * time.Second
	}
	if cfg.AccessReviewsPerQuery == 0 {
		cfg.AccessReviewsPerQuery = DefaultReviewsPerQuery
	}
	if cfg.AccessReviewsPerPerson == 0 {
		cfg.AccessReviewsPerPerson = DefaultReviewsPerPerson
	}
	if cfg.ReviewTimeout == 0 {
		cfg.ReviewTimeout = 5 * time.Second
	}
	if cfg.ReplicaTimeout == 0 {
		cfg.ReplicaTimeout = 3 * cfg.ReviewTimeout
	}
	if cfg.FormTimeout == 0 {
		cfg.FormTimeout = 10 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	cfg.BasePath = "/" + strings.Trim(cfg.BasePath, "/")
	stopping, stop := context.WithCancel(context.Background())
	return &Web{
		cfg:       cfg,
		log:       cfg.Logger,
		access:    newAccessCache(cfg.AccessTTL, cfg.AccessReviewsPerPerson),
		timelines: newTimelines(cfg.Clock),
		stopping:  stopping,
		stop:      stop,
	}
}

// ClustersChanged forgets what the access cache keeps of the clusters the
// agents list removed.
func (wb *Web) ClustersChanged(c fleet.Change) {
	for _, name := range c.Removed {
		wb.access.forget(name)
	}
	wb.timelines.forget(c.Removed)
}

// EndStreams ends the fleet pages' event streams now: a stopping hub calls
// it as it stops taking requests, so that none holds it for the whole
// grace. EventSource connects again, to the next hub, on its own.
func (wb *Web) EndStreams() { wb.stop() }

// ValidBasePath says whether p is a base path the hub's routes can sit
// under: "/", or segments of URL-safe characters, each one at least one
// long, with a trailing "/" or not. Anything else (spaces, braces, empty
// segments) would make the router's patterns invalid, or mean another path.
func ValidBasePath(p string) bool {
	if p == "/" {
		return true
	}
	rest, ok := strings.CutPrefix(p, "/")
	if !ok {
		return false
	}
	rest = strings.TrimSuffix(rest, "/")
	for seg := range strings.SplitSeq(rest, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
		for _, r := range seg {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-._~", r)) {
				return false
			}
		}
	}
	return true
}
