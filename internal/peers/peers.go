// Package peers is the link between hub replicas (SPEC section 8): each
// replica tells every other which clusters' agents it holds (claims.go),
// and carries the requests they receive for those clusters to their agents
// (forward.go). Who the replicas are, and the TLS that proves it both ways,
// come from a Membership (internal/replicas: a Lease per replica).
package peers

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/tetherhq/tether/internal/hub"
	"github.com/tetherhq/tether/internal/kubeproxy"
)

// Peer is another replica: its name and where it takes peer connections.
type Peer struct {
	Name, Addr string
}

// Membership says who the replicas are, and gives the TLS between them.
type Membership interface {
	// Self is this replica's name.
	Self() string
	// Peers are the other replicas alive now.
	Peers() []Peer
	// Changed gets a value whenever Peers changes.
	Changed() <-chan struct{}
	// ServerTLS is the peer listener's: it takes only live replicas.
	ServerTLS() *tls.Config
	// ClientTLS is for dialing replica name: it takes only that replica.
	ClientTLS(name string) *tls.Config
}

// Config is everything Peers needs. Zero durations take the defaults.
type Config struct {
	Logger  *slog.Logger
	Hub     *hub.Hub
	Members Membership
	// Ping is how often a claims stream with nothing to say sends a
	// ping; a stream silent for three of them is taken for dead, and its
	// replica's claims are dropped. Zero means 2 s.
	Ping time.Duration
	// People carries sign-outs and the users list between replicas
	// (people.go); a zero one carries neither.
	People PeopleConfig
}

// Peers keeps a link to every other replica, and serves theirs.
type Peers struct {
	cfg     Config
	log     *slog.Logger
	forward http.Handler      // carries other replicas' requests (forward.go)
	watches kubeproxy.Watches // the watches forward carries
	// watchesEnding is closed by EndWatches: the claims streams served
	// say so.
	watchesEnding  chan struct{}
	endWatchesOnce sync.Once
	// draining is closed by Drain: the claims streams served say so.
	draining  chan struct{}
	drainOnce sync.Once
	people    *people // sign-outs and users lists (people.go); nil for none

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	ending sync.WaitGroup // claims ended, closing their idle connections (upstream.end)

	mu       sync.Mutex            // guards links and splices
	links    map[string]*link      // by replica
	splices  map[net.Conn]net.Conn // the streams spliced for others, peer side to agent side
	splicing sync.WaitGroup        // the splices under way
}

// New starts the links to the replicas Members names, and keeps them in
// step as it changes. Close stops them.
func New(cfg Config) *Peers {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Ping == 0 {
		cfg.Ping = 2 * time.Second
	}
	p := &Peers{cfg: cfg, log: cfg.Logger, links: map[string]*link{}, splices: map[net.Conn]net.Conn{},
		watchesEnding: make(chan struct{}), draining: make(chan struct{})}
	p.forward = p.newForwarder()
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.people = p.newPeople()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			p.reconcile()
			select {
			case <-p.ctx.Done():
				return
			case <-cfg.Members.Changed():
			}
		}
	}()
	return p
}

// Handler serves the peer port: another replica's claims stream, and the
// requests it carries to the clusters whose agents this one holds.
func (p *Peers) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+claimsPath, p.serveClaims)
	mux.Handle(clustersPath+"{cluster}/{path...}", p.forward)
	mux.HandleFunc("GET "+streamsPath+"{cluster}", p.serveStream)
	mux.HandleFunc("GET "+credentialsPath+"{cluster}", p.serveCredentials)
	p.people.routes(mux)
	return mux
}

// Server returns the peer listener's server for handler: TLS from
// Members, HTTP/1.1 only (upgrades pass as they do to an API server).
func (p *Peers) Server(handler http.Handler) *http.Server {
	return &http.Server{
		Handler:           handler,
		TLSConfig:         p.cfg.Members.ServerTLS(),
		TLSNextProto:      map[string]func(*http.Server, *tls.Conn, http.Handler){},
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
		BaseContext:       func(net.Listener) context.Context { return p.ctx },
	}
}

// Close ends the links, drops what they said, and waits for them.
func (p *Peers) Close() error {
	p.cancel()
	p.people.close()
	p.wg.Wait()
	p.mu.Lock()
	links := p.links
	p.links = map[string]*link{}
	splices := p.splices
	p.splices = map[net.Conn]net.Conn{}
	p.mu.Unlock()
	for _, l := range links {
		l.stop()
	}
	for conn, st := range splices {
		conn.Close()
		st.Close()
	}
	p.splicing.Wait()
	p.ending.Wait()
	return nil
}

// track counts a splice under way, so that Close ends it, unless Peers
// is closing.
func (p *Peers) track(conn, st net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctx.Err() != nil {
		return false
	}
	p.splices[conn] = st
	p.splicing.Add(1)
	return true
}

func (p *Peers) untrack(conn net.Conn) {
	p.mu.Lock()
	delete(p.splices, conn)
	p.mu.Unlock()
	p.splicing.Done()
}

// reconcile starts a link to each replica that has none, and stops those
// to replicas gone or moved.
func (p *Peers) reconcile() {
	want := map[string]Peer{}
	for _, peer := range p.cfg.Members.Peers() {
		want[peer.Name] = peer
	}
	p.cfg.Hub.SetReplicas(len(want) + 1)
	p.mu.Lock()
	defer p.mu.Unlock()
	for name, l := range p.links {
		if peer, ok := want[name]; !ok || peer.Addr != l.addr {
			delete(p.links, name)
			l.stop()
		}
	}
	if p.ctx.Err() != nil {
		return
	}
	for name, peer := range want {
		if p.links[name] == nil {
			p.links[name] = p.startLink(peer)
			p.people.linked(p.links[name])
		}
	}
}
