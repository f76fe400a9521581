// Package agent is Tether's agent: it runs in a private cluster, dials out to
// the hub over one WebSocket, and relays the streams the hub opens to the
// cluster's API server. Nothing in the cluster listens but /healthz.
package agent

import (
	"context"
	crand "crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetherhq/tether/internal/inventory/watch"
	"github.com/tetherhq/tether/internal/tunnel"
	"github.com/tetherhq/tether/internal/version"
)

// maxHubStreams bounds the streams the hub may have open through the agent
// at once; past it a new one is reset at once, and the hub answers its
// request 503. Each is a connection to the API server: a file descriptor,
// two goroutines and about 22 KiB in all while idle (1,000 idle watches
// took the agent from 19 to 41 MiB), and no buffer while its reader at the
// hub is behind (tunnel's ReadFrom reads only what the window lets it
// send). 2,048 of them are about 45 MiB more, within the chart's 128Mi
// limit. The hub's own bound (TETHER_MAX_STREAMS_PER_AGENT, 512 and 16 for
// its probes by default) comes first; this one holds against a hub set
// higher.
const maxHubStreams = 2048

// Config is everything an Agent needs. Options come from the environment;
// the rest have defaults and exist so tests can replace them.
type Config struct {
	Options
	Logger *slog.Logger
	// Tunnel tunes the multiplexer. A zero field takes tunnel.DefaultConfig's
	// value, but MaxPeerStreams takes maxHubStreams: it can't be unbounded
	// here.
	Tunnel tunnel.Config
	// TLSConfig checks the hub's certificate. Nil means one trusting
	// HubCAFile, or the system's roots.
	TLSConfig *tls.Config
	// DialHub, when set, makes the connection to the hub instead of a
	// TCP dial, and no proxy is used: a hub's own agents reach it in
	// memory. Nil means TCP, through Proxy.
	DialHub func(ctx context.Context, network, addr string) (net.Conn, error)
	// DialAPIServer dials the API server for each stream. Nil means net.Dialer.
	DialAPIServer func(ctx context.Context, network, addr string) (net.Conn, error)
	// Sleep waits d or until ctx is done. Nil means a timer; tests record the
	// waits instead of sleeping through them.
	Sleep func(ctx context.Context, d time.Duration) error
	// Random returns a number in [0, 1) for jitter. Nil means math/rand.
	Random func() float64
	// HandshakeTimeout bounds the upgrade and the hello/welcome exchange.
	HandshakeTimeout time.Duration
	// Inventory, when set, watches the cluster: the agent runs it and
	// streams what it sees to the hub on each connection (SPEC section 5).
	// Nil means no inventory.
	Inventory *watch.Watcher
}

// Agent keeps one connection to the hub up. Create it with New, run it with
// Run.
type Agent struct {
	cfg Config
	log *slog.Logger
	hub string // the hub's address as people write it, for log lines

	// live counts the welcomed connections not yet ended: the agent's
	// own and those it moved from (draining), which still carry streams.
	// The agent is connected while any lives, through a move too.
	live     atomic.Int32
	draining atomic.Int32

	// instance and connections order this process's connections for the
	// hub (protocol.Message.Instance).
	instance    string
	connections atomic.Uint64

	// refusedLogged is set once a person's stream has been refused under
	// ProxyOff and said so at Warn: a hub that keeps sending them is
	// logged once, the rest at Debug.
	refusedLogged atomic.Bool

	ceilingMu   sync.Mutex // guards the following
	lastCeiling ceiling    // the last one logged
}

// New checks cfg and fills in defaults.
func New(cfg Config) (*Agent, error) {
	if cfg.HubURL == nil {
		return nil, errors.New("agent: no hub URL")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Tunnel.MaxPeerStreams == 0 {
		cfg.Tunnel.MaxPeerStreams = maxHubStreams
	}
	if err := tunnel.VerifyConfig(cfg.Tunnel); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	if cfg.TLSConfig == nil && cfg.HubCAFile != "" {
		pool, err := LoadCertPool(cfg.HubCAFile)
		if err != nil {
			return nil, fmt.Errorf("TETHER_HUB_CA must be a PEM file of CA certificates: %w", err)
		}
		cfg.TLSConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	if cfg.DialAPIServer == nil {
		cfg.DialAPIServer = (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext
	}
	if cfg.Sleep == nil {
		cfg.Sleep = sleep
	}
	if cfg.Random == nil {
		cfg.Random = rand.Float64
	}
	if cfg.HandshakeTimeout == 0 {
		cfg.HandshakeTimeout = 30 * time.Second
	}
	if cfg.TokenReread == 0 {
		cfg.TokenReread = time.Minute
	}
	var id [8]byte
	crand.Read(id[:])
	return &Agent{
		cfg:      cfg,
		log:      cfg.Logger.With("agent", cfg.Name),
		hub:      cfg.HubURL.String(),
		instance: hex.EncodeToString(id[:]),
	}, nil
}

// Connected reports whether the agent has a working connection to the hub.
func (a *Agent) Connected() bool { return a.live.Load() > 0 }

// Run keeps the agent connected until ctx is done, when it closes the
// connection cleanly and returns nil. It returns a *RefusedError when the
// hub refuses the agent, since trying again would not help, and other errors
// only for failures to start (the health listener's address taken).
func (a *Agent) Run(ctx context.Context) error {
	if a.cfg.HubURL.Scheme == "http" && a.cfg.DialHub == nil {
		a.log.Warn("The hub's address is plain http: the agent's token will cross the network in clear. Use https.", "hub", a.hub)
	}
	a.log.Info(fmt.Sprintf("Tether %s agent for %q, relaying to %s", version.Version, a.cfg.Name, a.cfg.APIServer))
	if a.cfg.ProxyOff {
		a.log.Info("The proxy is off (TETHER_PROXY=false): the agent carries the hub's own probes and access reviews, and no one's requests")
	}

	// The health server lives as long as Run: stopping it must not wait for
	// the caller's ctx, or a refused agent would never exit.
	// A takeover on a connection the agent moved from stops it with the
	// RefusedError as the cause.
	ctx, stop := context.WithCancelCause(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop(nil)
	if a.cfg.HealthAddr != "" {
		ln, err := net.Listen("tcp", a.cfg.HealthAddr)
		if err != nil {
			return fmt.Errorf("TETHER_HEALTH_ADDR %q can't be listened on: %w", a.cfg.HealthAddr, err)
		}
		srv := &http.Server{Handler: a.healthHandler(), ReadHeaderTimeout: 10 * time.Second}
		wg.Add(2)
		go func() { defer wg.Done(); srv.Serve(ln) }()
		go func() { defer wg.Done(); <-ctx.Done(); srv.Close() }()
	}

	if a.cfg.Inventory != nil {
		wg.Add(1)
		go func() { defer wg.Done(); a.cfg.Inventory.Run(ctx) }()
	}

	attempt := 0
	for {
		res := a.connect(ctx)
		if ctx.Err() != nil {
			return a.stopped(ctx)
		}
		var refused *RefusedError
		if errors.As(res.err, &refused) {
			a.log.Error(refused.Error())
			return refused
		}
		if res.connected {
			attempt = 0
		}
		if old := res.moved; old != nil {
			a.log.Info("The hub asked this agent to move to another replica", "hub", a.hub)
			wg.Add(1)
			go func() { defer wg.Done(); old.drain(ctx, stop) }()
			if err := a.cfg.Sleep(ctx, time.Duration(a.cfg.Random()*float64(moveSpread))); err != nil {
				return a.stopped(ctx)
			}
			continue
		}
		wait := res.wait
		if wait < 0 {
			wait = backoff(attempt, a.cfg.Random())
			attempt++
		}
		if !res.connected {
			a.log.Warn(fmt.Sprintf("Can't reach the hub at %s: %v", a.hub, res.err))
		}
		a.log.Info(fmt.Sprintf("Connecting again in %d s: %v", int(math.Round(wait.Seconds())), res.err))
		if err := a.cfg.Sleep(ctx, wait); err != nil {
			return a.stopped(ctx)
		}
	}
}

// stopped is what Run returns once ctx is done: nil when the agent was
// stopped, the refusal when a takeover on a connection it moved from
// stopped it.
func (a *Agent) stopped(ctx context.Context) error {
	var refused *RefusedError
	if errors.As(context.Cause(ctx), &refused) {
		a.log.Error(refused.Error())
		return refused
	}
	return nil
}

// RefusedError is the hub's refusal of this agent. Its text is the line the
// agent logs and exits with.
type RefusedError struct {
	Hub    string
	Reason string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("The hub at %s refused this agent: %s", e.Hub, e.Reason)
}

// Refusal reasons, as SPEC section 1 words them.
const (
	reasonUnknown  = "it doesn't know this name and token."
	reasonTakeover = "another agent connected as it (do two clusters use the same name and token?)."
	reasonNoAgents = "it takes no agents (it has no agents list: set TETHER_FLEET_AGENTS or TETHER_FLEET_AGENTS_FILE on the hub)."
)

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
