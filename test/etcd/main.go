// Command etcd runs a one-member etcd for a throw-away Kubernetes API server
// (internal/localkube). It embeds etcd's server rather than building etcd's
// own command, so that this module stays small and its flags stay few: the
// data directory and the two URLs, which the caller picks so that nothing
// here chooses ports.
//
// It logs at warn level to standard error, since etcd's info level writes
// hundreds of lines per start that bury the lines that matter, and it stops
// cleanly on SIGTERM or SIGINT, exiting 0.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "etcd:", err)
		os.Exit(1)
	}
}

func run() error {
	dataDir := flag.String("data-dir", "", "where etcd keeps its data (required)")
	clientURL := flag.String("listen-client-url", "", "where clients connect, like http://127.0.0.1:2379 (required)")
	peerURL := flag.String("listen-peer-url", "", "where peers would connect, like http://127.0.0.1:2380 (required)")
	logLevel := flag.String("log-level", "warn", "debug, info, warn or error")
	noFsync := flag.Bool("unsafe-no-fsync", false, "skip fsync: faster, and fine for data that is thrown away")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}

	cfg := embed.NewConfig()
	cfg.Name = "localkube"
	cfg.LogLevel = *logLevel
	cfg.UnsafeNoFsync = *noFsync
	// NewConfig leaves this 0, unlike etcd's own flags, and then every
	// request counts as slow and is logged at warn level.
	cfg.WarningUnaryRequestDuration = embed.DefaultWarningUnaryRequestDuration
	if *dataDir == "" {
		return errors.New("-data-dir must be set")
	}
	cfg.Dir = *dataDir
	client, err := parseURL("-listen-client-url", *clientURL)
	if err != nil {
		return err
	}
	peer, err := parseURL("-listen-peer-url", *peerURL)
	if err != nil {
		return err
	}
	cfg.ListenClientUrls = []url.URL{*client}
	cfg.AdvertiseClientUrls = []url.URL{*client}
	cfg.ListenPeerUrls = []url.URL{*peer}
	cfg.AdvertisePeerUrls = []url.URL{*peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		return errors.New("not ready after 60 s")
	case <-ctx.Done():
		return nil
	}
	select {
	case err := <-e.Err():
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
		return nil
	}
}

func parseURL(flagName, s string) (*url.URL, error) {
	if s == "" {
		return nil, fmt.Errorf("%s must be set", flagName)
	}
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return nil, fmt.Errorf("%s must be like http://127.0.0.1:2379, not %q", flagName, s)
	}
	return u, nil
}
