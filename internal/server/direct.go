package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/tetherhq/tether/internal/agent"
	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/hub"
	"github.com/tetherhq/tether/internal/listfile"
)

// The clusters of TETHER_FLEET_CLUSTERS, which the hub reaches itself, are
// served by agents of the hub's own, one per cluster, in the hub's process:
// each connects to the hub in memory, with a token made at start, and
// relays to its API server as an agent in the cluster would. So such a
// cluster is shown, probed, proxied and inventoried exactly like an
// agent's, by the same code (docs/decisions/014-clusters-the-hub-reaches.md).

// ownAgents are the hub's agents for the clusters it reaches itself.
type ownAgents struct {
	agents []*agent.Agent
	ln     *memListener
}

// newOwnAgents makes an agent and a token for each cluster, for a hub
// served under basePath. entries are what the agents list must also hold
// for them, direct their API servers. Its errors (a CA or token file that can't be read) stop the hub at
// start.
func newOwnAgents(clusters []fleet.Cluster, basePath string, log *slog.Logger) (o *ownAgents, entries []fleet.Agent, direct map[string]hub.DirectServer, err error) {
	o = &ownAgents{ln: newMemListener()}
	direct = make(map[string]hub.DirectServer, len(clusters))
	hubURL := &url.URL{Scheme: "http", Host: "tether-hub.internal", Path: strings.TrimSuffix(basePath, "/")}
	for _, c := range clusters {
		token, err := fleet.NewToken()
		if err != nil {
			return nil, nil, nil, err
		}
		opts := agent.Options{
			HubURL: hubURL, Name: c.Name, Token: token,
			TokenReread: time.Minute, TokenFile: c.TokenFile, CAFile: c.CAFile, APIServer: c.Server,
		}
		fail := func(err error) error { return fmt.Errorf("%s (%q): %w", fleet.SettingClusters, c.Name, err) }
		if _, err := opts.ReadServiceAccount(); err != nil {
			return nil, nil, nil, fail(err)
		}
		alog := log.With("cluster", c.Name)
		w, err := agent.NewWatcher(opts, alog)
		if err != nil {
			return nil, nil, nil, fail(err)
		}
		a, err := agent.New(agent.Config{Options: opts, Logger: alog, Inventory: w, DialHub: o.ln.dial})
		if err != nil {
			return nil, nil, nil, fail(err)
		}
		o.agents = append(o.agents, a)
		entries = append(entries, c.DirectEntry(listfile.HashToken(token)))
		direct[c.Name] = hub.DirectServer{Host: hostHeader(c.Server), ServerName: c.ServerName}
	}
	return o, entries, direct, nil
}

// hostHeader is the Host a client sends to server (host:port): without
// the port when it is https's own, as kubectl sends for a server URL that
// names none, and a proxy that routes by Host may match no other.
func hostHeader(server string) string {
	host, port, err := net.SplitHostPort(server)
	if err != nil || port != "443" {
		return server
	}
	if strings.Contains(host, ":") {
		return "[" + host + "]"
	}
	return host
}

// run runs the agents until ctx is done.
func (o *ownAgents) run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, a := range o.agents {
		wg.Go(func() { a.Run(ctx) })
	}
	wg.Wait()
}

// memListener hands the HTTP server the connections its own agents make
// in memory.
type memListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newMemListener() *memListener {
	return &memListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *memListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *memListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *memListener) Addr() net.Addr { return memAddr{} }

// dial is the own agents' DialHub.
func (l *memListener) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
		client.Close()
		server.Close()
		return nil, net.ErrClosed
	case <-ctx.Done():
		client.Close()
		server.Close()
		return nil, ctx.Err()
	}
}

type memAddr struct{}

func (memAddr) Network() string { return "memory" }
func (memAddr) String() string  { return "the hub's own agents" }
