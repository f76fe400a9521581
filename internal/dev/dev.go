// Package dev is `tether dev`: a real Kubernetes API server, a hub and an
// agent on one machine, all on 127.0.0.1, so a person can try Tether, and a
// developer can work on it, with nothing but Go installed.
package dev

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/tetherhq/tether/internal/agent"
	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/listfile"
	"github.com/tetherhq/tether/internal/localkube"
	"github.com/tetherhq/tether/internal/pki"
	"github.com/tetherhq/tether/internal/server"
)

// ClusterName is the local cluster's name in the hub.
const ClusterName = "dev"

// The person `tether dev` signs in as: bound to cluster-admin through a group
// that, unlike system:masters, the hub may impersonate.
const (
	AdminUser  = "admin"
	AdminGroup = "tether:admins"
)

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
	host, port, err := net.SplitHostPort(cfg.Addr)
	if err == nil && host == "localhost" {
		// Taken as 127.0.0.1, which the hub's certificate and the printed
		// addresses name.
		host, cfg.Addr = "127.0.0.1", net.JoinHostPort("127.0.0.1", port)
	}
	if err != nil {
		return fmt.Errorf("tether dev listens on loopback only, at an address with a port like 127.0.0.1:8080; --addr %q is not one (%v)", cfg.Addr, err)
	}
	if net.ParseIP(host) == nil || !net.ParseIP(host).IsLoopback() {
		return fmt.Errorf("tether dev listens on loopback only: --addr must be like 127.0.0.1:8080, not %q", cfg.Addr)
	}
	// The hub's address first: taken, it is said at once, not after the
	// API server has started and stopped again.
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("the hub can't listen on %s: %w (is another tether dev running? choose another with --addr)", cfg.Addr, err)
	}
	defer ln.Close() // server.Serve closes it too, once it has it
	// With port 0 the kernel picks one: the hub's URL, the kubeconfig and
	// the agent need the port it picked.
	cfg.Addr = ln.Addr().String()
	log := cfg.Logger
	// The first run builds it, and localkube logs that, with how long it takes.
	fmt.Fprintln(cfg.Out, "Starting a local Kubernetes API server…")
	cluster, err := localkube.Start(ctx, localkube.Config{Build: cfg.Build, Logger: log, Controllers: true})
	if err != nil {
		return fmt.Errorf("start the local API server: %w", err)
	}
	defer cluster.Close()

	token, err := fleet.NewToken()
	if err != nil {
		return err
	}
	adminToken, err := fleet.NewToken()
	if err != nil {
		return err
	}
	if err := bindAdmins(ctx, cluster); err != nil {
		return err
	}
	// The agent's service account reads the inventory kinds, as the Helm
	// chart lets it.
	if err := cluster.GrantInventory(ctx, localkube.Namespace, localkube.ServiceAccount); err != nil {
		return err
	}
	// kubectl sends credentials over TLS only, so the hub serves HTTPS with
	// a certificate from a CA made for this run.
	ca, err := pki.NewCA("tether dev", localkube.Lifetime)
	if err != nil {
		return err
	}
	certFile, keyFile := filepath.Join(cluster.Dir, "hub.crt"), filepath.Join(cluster.Dir, "hub.key")
	if err := writeHubCert(ca, certFile, keyFile, host); err != nil {
		return err
	}
	// A key of the run's own, in a file as TETHER_TOKEN_SIGNING_KEY_FILE
	// would give one: the hub would otherwise warn, with advice that a dev
	// hub, which reads no settings, can't follow.
	signingKeyFile := filepath.Join(cluster.Dir, "signing-key.pem")
	if err := writeSigningKey(signingKeyFile); err != nil {
		return err
	}
	hubURL := &url.URL{Scheme: "https", Host: cfg.Addr}
	opts := server.Options{
		Listener:        ln, // server.Serve closes it
		Addr:            cfg.Addr,
		PublicURL:       hubURL,
		BasePath:        "/",
		Heartbeat:       30 * time.Second,
		ReconnectSpread: time.Second,
		ShutdownGrace:   time.Second,
		Fleet: fleet.Config{
			Agents: fleet.AgentsEntry(ClusterName, listfile.TokenSHA256(token)),
		},
		AuditFile:   filepath.Join(cluster.Dir, "audit.jsonl"),
		TLSCertFile: certFile,
		TLSKeyFile:  keyFile,
		Auth: auth.Config{
			Users:          fmt.Sprintf("- name: %s\n  tokenSha256: %s\n  groups: [%q]\n", AdminUser, listfile.TokenSHA256(adminToken), AdminGroup),
			HubURL:         hubURL.String(),
			SigningKeyFile: signingKeyFile,
		},
	}
	kubeconfig := filepath.Join(cluster.Dir, "tether.kubeconfig")
	if err := writeKubeconfig(kubeconfig, hubURL.String()+"/clusters/"+ClusterName, adminToken, ca.CertPEM); err != nil {
		return err
	}
	// curl and browsers need the CA on its own: the kubeconfig carries it
	// inline, where curl --cacert can't take it from.
	caFile := filepath.Join(cluster.Dir, "hub-ca.crt")
	if err := os.WriteFile(caFile, ca.CertPEM, 0o644); err != nil {
		return err
	}
	// The fleet page's sign-in form takes the same token the kubeconfig
	// holds; a file of its own saves digging it out of the kubeconfig.
	tokenFile := filepath.Join(cluster.Dir, "admin.token")
	if err := os.WriteFile(tokenFile, []byte(adminToken+"\n"), 0o600); err != nil {
		return err
	}
	agentOpts := agent.Options{
		HubURL:            hubURL,
		Name:              ClusterName,
		Token:             token,
		TokenReread:       time.Minute,
		ServiceAccountDir: cluster.ServiceAccountDir,
		APIServer:         net.JoinHostPort(cluster.Host, cluster.Port),
	}
	agentLog := log.With("component", "agent")
	watcher, err := agent.NewWatcher(agentOpts, agentLog)
	if err != nil {
		return err
	}
	ag, err := agent.New(agent.Config{
		Options:   agentOpts,
		Logger:    agentLog,
		TLSConfig: &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12},
		Inventory: watcher,
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
		errs <- server.Serve(ctx, opts, log.With("component", "hub"), func(net.Addr) { close(listening) })
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
	fmt.Fprintf(cfg.Out, "  hub:              %s (the fleet page)\n", hubURL)
	fmt.Fprintf(cfg.Out, "  sign-in token:    %s (paste what it holds into the fleet page's sign-in form)\n", tokenFile)
	fmt.Fprintf(cfg.Out, "  cluster:          %q, Kubernetes %s at %s, relayed by an agent\n", ClusterName, cluster.Version, cluster.URL)
	fmt.Fprintf(cfg.Out, "  kubeconfig:       %s (through the hub, as %q in group %q, bound to cluster-admin)\n", kubeconfig, AdminUser, AdminGroup)
	fmt.Fprintf(cfg.Out, "  hub CA:           %s (the kubeconfig trusts it; for curl: curl --cacert %s %s/api/kubeconfig …)\n", caFile, caFile, hubURL)
	fmt.Fprintf(cfg.Out, "  service account:  %s (the agent's token and ca.crt, as a pod would have them)\n", cluster.ServiceAccountDir)
	fmt.Fprintf(cfg.Out, "  audit log:        %s\n", opts.AuditFile)
	fmt.Fprintf(cfg.Out, "Try: kubectl --kubeconfig %s get namespaces\n", kubeconfig)
	// An agent of another hub, outside a pod, needs the service account and
	// the API server's address a pod would be given.
	fmt.Fprintf(cfg.Out, "An agent outside a pod relays to this API server with (plus TETHER_HUB_URL, TETHER_AGENT_NAME and TETHER_AGENT_TOKEN for its hub):\n")
	fmt.Fprintf(cfg.Out, "  TETHER_SERVICEACCOUNT_DIR=%s KUBERNETES_SERVICE_HOST=%s KUBERNETES_SERVICE_PORT=%s TETHER_HEALTH_ADDR=0 tether agent\n",
		cluster.ServiceAccountDir, cluster.Host, cluster.Port)
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

// bindAdmins binds cluster-admin to AdminGroup.
func bindAdmins(ctx context.Context, cluster *localkube.Cluster) error {
	binding := map[string]any{
		"apiVersion": "rbac.authorization.k8s.io/v1",
		"kind":       "ClusterRoleBinding",
		"metadata":   map[string]any{"name": "tether-dev-admins"},
		"roleRef":    map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
		"subjects":   []map[string]any{{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": AdminGroup}},
	}
	if err := cluster.Do(ctx, "POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding, nil); err != nil {
		return fmt.Errorf("bind cluster-admin to %q: %w", AdminGroup, err)
	}
	return nil
}

// writeHubCert writes the hub's certificate, followed by its CA so the hub
// hands the CA out in kubeconfigs, and its key.
// writeSigningKey writes a new Ed25519 key for the hub's tokens, as
// `openssl genpkey -algorithm ed25519` would.
func writeSigningKey(file string) error {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return err
	}
	return os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
}

func writeHubCert(ca *pki.CA, certFile, keyFile, host string) error {
	hosts := []string{"127.0.0.1", "localhost", "::1"}
	if !slices.Contains(hosts, host) {
		hosts = append(hosts, host) // another loopback address, like 127.0.0.2
	}
	cert, key, err := ca.Issue(pki.Leaf{CommonName: "tether dev hub", Hosts: hosts})
	if err != nil {
		return err
	}
	if err := os.WriteFile(certFile, append(cert, ca.CertPEM...), 0o600); err != nil {
		return err
	}
	return os.WriteFile(keyFile, key, 0o600)
}

// writeKubeconfig writes a kubeconfig for server, trusting caPEM, with a
// bearer token.
func writeKubeconfig(path, server, token string, caPEM []byte) error {
	cluster := map[string]any{"server": server, "certificate-authority-data": base64.StdEncoding.EncodeToString(caPEM)}
	cfg := map[string]any{
		"apiVersion":      "v1",
		"kind":            "Config",
		"clusters":        []map[string]any{{"name": ClusterName, "cluster": cluster}},
		"users":           []map[string]any{{"name": AdminUser, "user": map[string]any{"token": token}}},
		"contexts":        []map[string]any{{"name": ClusterName, "context": map[string]any{"cluster": ClusterName, "user": AdminUser}}},
		"current-context": ClusterName,
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}
