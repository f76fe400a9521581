package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/kubeproxy"
	"github.com/tetherhq/tether/internal/peers"
	"github.com/tetherhq/tether/internal/recording"
	"github.com/tetherhq/tether/internal/version"
)

// Serve runs a hub with opts until ctx is done, then shuts down as SPEC
// section 2 says: it stops taking new requests, lets open ones finish for up
// to ShutdownGrace, then tells its agents to come back after a random delay
// within ReconnectSpread and closes their connections. ready, if not nil, is
// called with the public listener's address once it listens.
func Serve(ctx context.Context, opts Options, log *slog.Logger, ready func(addr net.Addr)) error {
	var h *Hub
	fleetCfg := opts.Fleet
	fleetCfg.Logger = log
	fleetCfg.OnChange = func(c fleet.Change) { // Watch starts after h is set
		h.AgentsChanged(c)
		warnUnpinnedForwardToken(log, h.cfg.Agents.List(), opts.Clusters)
	}
	own, ownEntries, direct, err := newOwnAgents(opts.Clusters, opts.BasePath, log)
	if err != nil {
		return err
	}
	fleetCfg.Extra = ownEntries
	agents, err := fleet.Load(fleetCfg)
	if err != nil {
		return err
	}
	warnUnpinnedForwardToken(log, agents.List(), opts.Clusters)
	// Entries of TETHER_FLEET_CLUSTERS alone don't make an agents list:
	// the hub's own agents connect, and every other agent is refused.
	listed := fleetCfg.HasList()
	if !listed {
		log.Warn("No agents list (TETHER_FLEET_AGENTS or TETHER_FLEET_AGENTS_FILE): this hub refuses every agent")
	}
	authCfg := opts.Auth
	authCfg.Logger = log
	people, err := auth.New(authCfg)
	if err != nil {
		return err
	}
	defer people.Close()
	audit, closeAudit, err := openAudit(opts.AuditFile)
	if err != nil {
		return err
	}
	defer closeAudit()

	var certs *certReloader
	var kubeconfigCA func() []byte
	if opts.TLSCertFile != "" {
		if certs, err = newCertReloader(opts.TLSCertFile, opts.TLSKeyFile, log); err != nil {
			return err
		}
		kubeconfigCA = certs.selfSignedRoot
	}

	var rs *replicaSet
	var members peers.Membership
	if opts.Coordination == CoordinationKubernetes {
		if rs, err = joinReplicas(ctx, opts, log); err != nil {
			return err
		}
		members = membership{rs.members}
		defer func() {
			if rs.srv == nil { // Serve failed before it served the peer port
				rs.ln.Close()
				rs.members.Close()
			}
		}()
	}

	recordings, err := openRecordings(opts.Recordings, recording.Config{Logger: log})
	if err != nil {
		return err
	}
	if recordings != nil {
		defer recordings.Close() // after the hub's Close (deferred later), once sessions are done
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	h, err = New(Config{
		KubeconfigCA:    kubeconfigCA,
		Auth:            people,
		AuthConfig:      authCfg,
		PublicURL:       urlString(opts),
		Audit:           audit,
		Logger:          log,
		Agents:          agents,
		OwnAgentsOnly:   !listed,
		BasePath:        opts.BasePath,
		Heartbeat:       opts.Heartbeat,
		ReconnectSpread: opts.ReconnectSpread,
		Registerer:      reg,
		// Zero (Options made other than by OptionsFromEnv) takes the defaults.
		AccessReviewsPerQuery:  opts.AccessReviewsPerQuery,
		AccessReviewsPerPerson: opts.AccessReviewsPerPerson,
		Direct:                 direct,
		Limits:                 opts.Limits,
		InventoryMaxBytes:      opts.InventoryMaxBytes,
		MaxStreamsPerAgent:     opts.MaxStreamsPerAgent,
		Replica:                opts.Replica.Name,
		Members:                members,
		Recordings:             recordings,
		RecordingViewers:       opts.Recordings.Viewers,
	})
	if err != nil {
		return err
	}

	ln := opts.Listener
	if ln == nil {
		if ln, err = net.Listen("tcp", opts.Addr); err != nil {
			return fmt.Errorf("TETHER_ADDR %q can't be listened on: %w", opts.Addr, err)
		}
	}
	srv := publicServer(h.Handler(), log, readHeaderTimeout)
	scheme := "http"
	if certs != nil {
		srv.TLSConfig = &tls.Config{GetCertificate: certs.get, MinVersion: tls.VersionTLS12}
		scheme = "https"
		// Answers of unknown length go out a flushed piece per system
		// call (gather.go).
		ln = kubeproxy.GatherListener{Listener: ln}
		srv.ConnContext = kubeproxy.WithGatherConn
	}

	var metricsSrv *http.Server
	var metricsLn net.Listener
	if opts.MetricsAddr != "" {
		metricsLn, err = net.Listen("tcp", opts.MetricsAddr)
		if err != nil {
			ln.Close()
			return fmt.Errorf("TETHER_METRICS_ADDR %q can't be listened on: %w", opts.MetricsAddr, err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		metricsSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	}

	var wg sync.WaitGroup
	serveErr := make(chan error, 3)
	wg.Add(1)
	go func() {
		defer wg.Done()
		var err error
		if scheme == "https" {
			err = srv.ServeTLS(ln, "", "")
		} else {
			err = srv.Serve(ln)
		}
		if !errors.Is(err, http.ErrServerClosed) {
			serveErr <- err
		}
	}()
	if metricsSrv != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := metricsSrv.Serve(metricsLn); !errors.Is(err, http.ErrServerClosed) {
				serveErr <- err
			}
		}()
	}
	// The hub's own agents, for the clusters it reaches itself, connect
	// to it in memory, through a server of their own: one http.Server
	// serving a TLS and a plain listener sets HTTP/2 up for whichever
	// starts first, and kubectl's HTTP/2 then fails on the TLS one.
	ownSrv := publicServer(h.OwnAgentHandler(), log, readHeaderTimeout)
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := ownSrv.Serve(own.ln); !errors.Is(err, http.ErrServerClosed) {
			serveErr <- err
		}
	}()
	var replicasDone <-chan struct{}
	if rs != nil {
		rs.server(h)
		wg.Add(1)
		go func() { defer wg.Done(); rs.serve(serveErr) }()
		replicasDone = rs.members.Done()
	}
	ownCtx, stopOwn := context.WithCancel(context.Background())
	ownDone := make(chan struct{})
	go func() { defer close(ownDone); own.run(ownCtx) }()

	watchCtx, stopWatch := context.WithCancel(context.Background())
	if h.web != nil {
		// Each cluster's status over the last day, for the pages.
		wg.Add(1)
		go func() { defer wg.Done(); h.web.RecordTimelines(watchCtx) }()
	}
	if agents != nil && opts.Fleet.AgentsFile != "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := agents.Watch(watchCtx); err != nil {
				log.Warn("Can't follow the agents list; changes to it need a hub restart", "file", opts.Fleet.AgentsFile, "err", err)
			}
		}()
	}

	log.Info("Tether hub listening", "version", version.Version, "address", scheme+"://"+ln.Addr().String(), "publicURL", urlString(opts))
	if ready != nil {
		ready(ln.Addr())
	}

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-serveErr:
	case <-replicasDone:
		runErr = fmt.Errorf("this replica lost its place among the others: %w", rs.members.Err())
	}

	if opts.DrainDelay > 0 && runErr == nil {
		// Load balancers take a stopping pod out seconds after it is
		// told to stop: until then requests keep coming, and are served.
		// /readyz says it is going, so they take it out sooner.
		h.draining.Store(true)
		log.Info("Draining: taking requests while load balancers take this hub out", "drainDelay", opts.DrainDelay)
		if rs != nil {
			h.Drain() // the agents move to the other replicas meanwhile
		}
		select {
		case <-time.After(opts.DrainDelay):
		case runErr = <-serveErr:
		}
	}
	graceCtx, cancel := context.WithTimeout(context.Background(), opts.ShutdownGrace)
	if rs != nil && opts.DrainDelay > 0 && runErr == nil {
		// Agents still moving keep their clusters reachable through this
		// replica until the others have taken them, within the grace.
		if n, err := h.registry.WaitMoved(graceCtx); err != nil {
			log.Warn("Agents still here when the grace ended, not moved: closing them", "agents", n, "grace", opts.ShutdownGrace)
		}
	}
	log.Info("Shutting down: open requests may finish", "grace", opts.ShutdownGrace)
	// Watches never finish: they end at their next event's end, as the API
	// server ends its own when it stops.
	h.EndWatches()
	// Shutdown stops taking requests and waits for plain ones, not hijacked
	// ones: upgraded sessions still running get the rest of the grace period.
	srv.Shutdown(graceCtx)
	h.WaitRequests(graceCtx)
	if graceCtx.Err() != nil {
		log.Warn("Requests still open after the grace: closing them", "grace", opts.ShutdownGrace)
	}
	cancel()
	// The own agents leave as an agent does on SIGTERM; the others are
	// told to come back to the next hub.
	stopOwn()
	<-ownDone
	ownSrv.Close()
	h.Close()
	srv.Close()
	if rs != nil {
		rs.close()
	}
	// The requests the closing cut short end now: their audit lines are
	// written before the audit file closes (deferred above).
	endCtx, cancelEnd := context.WithTimeout(context.Background(), requestsEndTimeout)
	h.WaitRequests(endCtx)
	cancelEnd()
	if metricsSrv != nil {
		metricsSrv.Close()
	}
	stopWatch()
	wg.Wait()
	log.Info("The hub has stopped")
	return runErr
}

// warnUnpinnedForwardToken warns of each agent in list that gets people's
// own tokens (forwardToken) and whose CA isn't pinned (caSha256): TLS to
// its API server is checked against the CA its agent sends, so whoever
// holds that agent's token can stand in for the API server and read the
// people's tokens, which the hub itself takes too (an OIDC ID token is good
// for every cluster they may see). The clusters the hub reaches itself
// have their CA from the hub's settings.
func warnUnpinnedForwardToken(log *slog.Logger, list []fleet.Agent, direct []fleet.Cluster) {
	for _, a := range list {
		if !a.ForwardToken || a.CASHA256 != "" || slices.ContainsFunc(direct, func(c fleet.Cluster) bool { return c.Name == a.Name }) {
			continue
		}
		log.Warn("A cluster gets people's own tokens (forwardToken) but doesn't pin its CA (caSha256): whoever holds its agent's token could read them. Pin it with caSha256: the SHA-256 of the cluster's ca.crt", "cluster", a.Name)
	}
}

// requestsEndTimeout bounds the wait, after the hub closed its agents' and
// clients' connections, for the requests they cut short to end.
const requestsEndTimeout = 5 * time.Second

// readHeaderTimeout bounds how long a client may take to send its request's
// headers: a slowloris that trickles them holds a connection this long at
// most.
const readHeaderTimeout = 10 * time.Second

// publicServer is the hub's server on its public port. No ReadTimeout or
// WriteTimeout: watches, exec sessions and agents' tunnels last for hours.
// Headers must come within headerTimeout, and a keep-alive connection idle
// between requests is closed after a while, so idle and slow clients can't
// hold file descriptors for ever.
func publicServer(h http.Handler, log *slog.Logger, headerTimeout time.Duration) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: headerTimeout,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    1 << 20,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
}

func urlString(o Options) string {
	if o.PublicURL == nil {
		return ""
	}
	return o.PublicURL.String()
}

// certReloader serves the certificate in a pair of files, reading them again
// when they change, so a renewed certificate needs no restart.
type certReloader struct {
	certFile, keyFile string
	log               *slog.Logger

	mu      sync.Mutex // guards the following
	cert    *tls.Certificate
	root    []byte    // PEM: the last certificate of cert's chain, if a self-signed CA
	modTime time.Time // of the files the certificate came from
	failed  time.Time // of the files that last failed to load, once logged
	checked time.Time
}

func newCertReloader(certFile, keyFile string, log *slog.Logger) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile, log: log}
	if err := r.load(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *certReloader) load() error {
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("TETHER_TLS_CERT_FILE and TETHER_TLS_KEY_FILE must be a PEM certificate and its key: %w", err)
	}
	r.cert = &cert
	r.root = selfSignedRoot(cert.Certificate)
	r.modTime = r.newestModTime()
	return nil
}

// selfSignedRoot returns the root of the certificate the hub serves now,
// for kubeconfigs, or nil. It is as fresh as the last TLS handshake: the
// request for a kubeconfig came over one.
func (r *certReloader) selfSignedRoot() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.root
}

func (r *certReloader) newestModTime() time.Time {
	var t time.Time
	for _, f := range []string{r.certFile, r.keyFile} {
		if fi, err := os.Stat(f); err == nil && fi.ModTime().After(t) {
			t = fi.ModTime()
		}
	}
	return t
}

func (r *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// Look at the files at most once a second, not on every handshake.
	if time.Since(r.checked) > time.Second {
		r.checked = time.Now()
		if mt := r.newestModTime(); !mt.Equal(r.modTime) {
			// On error, keep serving the certificate we have, and say so
			// once for these files: they may be halfway through a renewal.
			if err := r.load(); err != nil {
				if !mt.Equal(r.failed) {
					r.failed = mt
					r.log.Warn("The TLS certificate files changed but can't be used; the hub goes on serving its certificate until they can", "err", err)
				}
			} else {
				r.log.Info("The hub serves its renewed TLS certificate", "notAfter", r.cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
			}
		}
	}
	return r.cert, nil
}

// openAudit opens TETHER_AUDIT_FILE for appending; "-" is standard output.
func openAudit(path string) (io.Writer, func() error, error) {
	if path == "-" {
		return os.Stdout, func() error { return nil }, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("TETHER_AUDIT_FILE %q can't be written: %w", path, err)
	}
	return f, f.Close, nil
}

// selfSignedRoot returns the last certificate of chain (DER, as a
// tls.Certificate holds it), as PEM, if it is a self-signed CA: a hub whose
// certificate chain ends in a private CA hands that CA out in its
// kubeconfigs, since kubectl sends credentials over TLS only and must be
// able to check the hub.
func selfSignedRoot(chain [][]byte) []byte {
	if len(chain) == 0 {
		return nil
	}
	last := chain[len(chain)-1]
	cert, err := x509.ParseCertificate(last)
	if err != nil || !cert.IsCA || cert.CheckSignatureFrom(cert) != nil {
		return nil
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: last})
}
