// Package dev is `tether dev`: a real Kubernetes API server, a hub and an
// agent on one machine, all on 127.0.0.1, so a person can try Tether, and a
// developer can work on it, with nothing but Go installed.
package dev

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"sync"
	"time"

	"github.com/tetherhq/tether/internal/agent"
	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/hub"
	"github.com/tetherhq/tether/internal/localkube"
)

// ClusterName is the local cluster's name in the hub.
const ClusterName = "dev"

// Config is what Run needs.
type Config struct {
	// Addr is where the hub listens; it must be on loopback.
	Addr string
	// Logger gets the hub's and the agent's logs.
	Logger *slog.Logger
	// Out gets the lines a person reads: where things are.
	Out io.Writer
	// Build says where the source tree and the binary cache are.
	Build localkube.BuildOptions
}

// Run starts the API server (building it first if it isn't cached), a hub and
// an agent, prints where they are, and runs until ctx is done; then it stops
// all three and returns once they are gone.
func Run(ctx context.Context, cfg Config) error {
	host, _, err := net.SplitHostPort(cfg.Addr)
	if err != nil || net.ParseIP(host) == nil || !net.ParseIP(host).IsLoopback() {
		return fmt.Errorf("tether dev listens on loopback only: --addr must be like 127.0.0.1:8080, not %q", cfg.Addr)
	}
	log := cfg.Logger
	fmt.Fprintln(cfg.Out, "Starting a local Kubernetes API server (the first run builds it from source: several minutes)…")
	cluster, err := localkube.Start(ctx, localkube.Config{Build: cfg.Build, Logger: log})
	if err != nil {
		return fmt.Errorf("start the local API server: %w", err)
	}
	defer cluster.Close()

	token, err := fleet.NewToken()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("the hub can't listen on %s: %w (is another tether dev running? choose another with --addr)", cfg.Addr, err)
	}
	hubURL := &url.URL{Scheme: "http", Host: cfg.Addr}
	opts := hub.Options{
		Listener:        ln, // hub.Serve closes it
		Addr:            cfg.Addr,
		PublicURL:       hubURL,
		BasePath:        "/",
		Heartbeat:       30 * time.Second,
		ReconnectSpread: time.Second,
		ShutdownGrace:   time.Second,
		Fleet: fleet.Config{
			Agents: fleet.AgentsEntry(ClusterName, fleet.TokenSHA256(token)),
		},
	}
	ag, err := agent.New(agent.Config{
		Options: agent.Options{
			HubURL:            hubURL,
			Name:              ClusterName,
			Token:             token,
			TokenReread:       time.Minute,
			ServiceAccountDir: cluster.ServiceAccountDir,
			APIServer:         net.JoinHostPort(cluster.Host, cluster.Port),
		},
		Logger: log.With("component", "agent"),
	})
	if err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	listening := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		errs <- hub.Serve(ctx, opts, log.With("component", "hub"), func(net.Addr) { close(listening) })
	}()
	select {
	case <-listening:
	case err := <-errs:
		wg.Wait()
		return err
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		errs <- ag.Run(ctx)
	}()

	fmt.Fprintf(cfg.Out, "\nTether is running on this machine:\n")
	fmt.Fprintf(cfg.Out, "  hub:              %s\n", hubURL)
	fmt.Fprintf(cfg.Out, "  cluster:          %q, Kubernetes %s at %s, relayed by an agent\n", ClusterName, cluster.Version, cluster.URL)
	fmt.Fprintf(cfg.Out, "  admin kubeconfig: %s (straight to the API server)\n", cluster.AdminKubeconfig)
	fmt.Fprintf(cfg.Out, "Press Ctrl-C to stop everything.\n\n")

	var first error
	select {
	case <-ctx.Done():
	case first = <-errs: // the hub or the agent stopped by itself
		cancel()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if first == nil {
			first = err
		}
	}
	if errors.Is(first, context.Canceled) {
		first = nil
	}
	return first
}
