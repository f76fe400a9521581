// Package localkube runs a real Kubernetes API server on this machine: for
// end-to-end tests, which must talk to a real API server and a real kubectl
// rather than a mock, and for `tether dev`.
//
// There is no Docker or kind to lean on, so Binaries builds kube-apiserver,
// kubectl and etcd from Go modules in the source tree (test/kube and
// test/etcd) and caches them; Start runs etcd and kube-apiserver on
// 127.0.0.1 with certificates it makes, and sets up what Tether's agent
// finds in a cluster: a service account with the impersonation role of the
// Helm chart, and its token and CA in a directory laid out like a pod's.
//
// There is no controller-manager or scheduler. So Deployments make no Pods,
// deleted namespaces stay Terminating, and no namespace gets a `default`
// ServiceAccount; the ServiceAccount admission plugin is off so that Pods
// can be created anyway. They stay Pending, unless Config.Node adds a node
// and they name it in spec.nodeName: then its test kubelet runs their
// containers as processes on this machine, and logs, exec, attach,
// port-forward and cp reach them through the API server as in a real
// cluster.
package localkube

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// What Start creates for the agent, named as the Helm chart names them for
// a release called "tether".
const (
	Namespace       = "tether"
	ServiceAccount  = "tether-agent"
	ImpersonateRole = "tether-impersonate"
)

// Config says how to start a cluster. The zero value builds the binaries
// if needed, from the source tree around the working directory.
type Config struct {
	// Paths are the binaries to run. Zero: Start calls Binaries(Build).
	Paths Paths
	// Build is used when Paths is zero. Its Logger defaults to Logger.
	Build BuildOptions

	// Logger receives progress; nil discards it.
	Logger *slog.Logger

	// TempDir is where the cluster's directory is made. Empty: os.TempDir().
	TempDir string

	// ReadyTimeout bounds the wait for /readyz. Zero: 90 s.
	ReadyTimeout time.Duration

	// APIServerArgs are added after Start's own flags, so they can add to
	// or override them (for example --authentication-config).
	APIServerArgs []string

	// Node starts a node, NodeName, with the cluster: see Node.
	Node bool

	// Controllers starts kube-controller-manager with the cluster, as a
	// real control plane has it: Deployments make ReplicaSets and Pods
	// (which stay Pending without a node and a scheduler), deleted
	// namespaces go, and the view, edit and admin ClusterRoles gather
	// their rules. Without it, none of that happens.
	Controllers bool
}

// Cluster is a running etcd and kube-apiserver, with Config.Controllers
// kube-controller-manager, and with Config.Node a kubelet. Close stops them.
type Cluster struct {
	// URL is the API server, like https://127.0.0.1:41234.
	URL        string
	Host, Port string
	// Version is the Kubernetes release running, like "v1.36.3".
	Version string

	// CAFile and CAPEM are the CA that signed the serving certificate,
	// which is valid for kubernetes.default.svc, kubernetes.default,
	// kubernetes, localhost, 127.0.0.1 and 10.0.0.1.
	CAFile string
	CAPEM  []byte

	// AdminToken is a static token for user "admin" in system:masters;
	// AdminKubeconfig is a kubeconfig file that uses it.
	AdminToken      string
	AdminKubeconfig string

	// ServiceAccountDir holds `token` and `ca.crt` as a pod's
	// /var/run/secrets/kubernetes.io/serviceaccount does, for the
	// ServiceAccount Namespace/ServiceAccount, which is bound to the
	// ClusterRole ImpersonateRole. The token is valid for 24 hours.
	ServiceAccountDir string
	// ServiceAccountName is that account's user name.
	ServiceAccountName string

	// AuditLogPath is the API server's audit log: one JSON event per line,
	// level Metadata for every request (who, as whom, what, the answer).
	AuditLogPath string

	// Kubectl is the path of a kubectl of the same release.
	Kubectl string

	// Node is the cluster's node if Config.Node asked for one, else nil.
	Node *Node

	// Dir is the cluster's temporary directory: certificates, etcd's data,
	// the logs of etcd (etcd.log), kube-apiserver (kube-apiserver.log) and
	// kube-controller-manager (kube-controller-manager.log), and the node's
	// (see Node). Close removes it.
	Dir string

	log     *slog.Logger
	owner   *os.File // ownerFile in Dir, locked while the cluster runs
	client  *http.Client
	etcd    *process
	apiserv *process
	ctrl    *process // kube-controller-manager, with Config.Controllers

	closeOnce sync.Once
	closeErr  error
}

// Start starts etcd and kube-apiserver, waits until /readyz says ok, and
// creates the agent's namespace, service account, role and token. The
// cluster runs until Close, not until ctx ends: ctx bounds start-up only.
//
// Ports are picked by asking the kernel for free ones, which another process
// could take before the child binds them; Start tries again when a child
// exits saying its address is in use.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Paths.APIServer == "" {
		b := cfg.Build
		if b.Logger == nil {
			b.Logger = log
		}
		p, err := Binaries(ctx, b)
		if err != nil {
			return nil, err
		}
		cfg.Paths = p
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 90 * time.Second
	}
	for attempt := 1; ; attempt++ {
		c, err := start(ctx, cfg, log)
		if err == nil || !errors.Is(err, errPortTaken) || attempt == 3 {
			return c, err
		}
		log.Info("A port was taken before the Kubernetes API server could bind it; trying other ports", "err", err)
	}
}

func start(ctx context.Context, cfg Config, log *slog.Logger) (_ *Cluster, err error) {
	began := time.Now()
	sweep(cfg.TempDir, log)
	dir, err := os.MkdirTemp(cfg.TempDir, dirPattern)
	if err != nil {
		return nil, fmt.Errorf("localkube: %w", err)
	}
	owner, err := own(dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("localkube: %w", err)
	}
	c := &Cluster{
		Version:            cfg.Paths.Version,
		Kubectl:            cfg.Paths.Kubectl,
		Dir:                dir,
		CAFile:             filepath.Join(dir, "pki", "ca.crt"),
		AdminKubeconfig:    filepath.Join(dir, "admin.kubeconfig"),
		ServiceAccountDir:  filepath.Join(dir, "serviceaccount"),
		ServiceAccountName: "system:serviceaccount:" + Namespace + ":" + ServiceAccount,
		AuditLogPath:       filepath.Join(dir, "audit.log"),
		log:                log,
		owner:              owner,
	}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()

	keys, err := newKeyMaterial()
	if err != nil {
		return nil, fmt.Errorf("localkube: make certificates: %w", err)
	}
	for _, d := range []string{"pki", "serviceaccount", "etcd"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, fmt.Errorf("localkube: %w", err)
		}
	}
	if err := keys.write(filepath.Join(dir, "pki")); err != nil {
		return nil, fmt.Errorf("localkube: %w", err)
	}
	c.CAPEM, c.AdminToken = keys.caPEM, keys.adminToken
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.CAPEM)
	c.client = &http.Client{Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool},
		ForceAttemptHTTP2: true,
	}}

	ports, err := freePorts(3)
	if err != nil {
		return nil, fmt.Errorf("localkube: %w", err)
	}
	etcdURL := "http://127.0.0.1:" + ports[0]
	c.Host, c.Port = "127.0.0.1", ports[2]
	c.URL = "https://" + net.JoinHostPort(c.Host, c.Port)

	c.etcd, err = startProcess("etcd", cfg.Paths.Etcd, []string{
		"-data-dir", filepath.Join(dir, "etcd"),
		"-listen-client-url", etcdURL,
		"-listen-peer-url", "http://127.0.0.1:" + ports[1],
		// The data lives as long as the cluster; fsync only slows tests.
		"-unsafe-no-fsync",
	}, filepath.Join(dir, "etcd.log"))
	if err != nil {
		return nil, fmt.Errorf("localkube: %w", err)
	}
	if err := writeAuditPolicy(filepath.Join(dir, "audit-policy.yaml")); err != nil {
		return nil, fmt.Errorf("localkube: %w", err)
	}
	args := append(apiServerArgs(dir, etcdURL, c.Port, c.AuditLogPath), cfg.APIServerArgs...)
	c.apiserv, err = startProcess("kube-apiserver", cfg.Paths.APIServer, args, filepath.Join(dir, "kube-apiserver.log"))
	if err != nil {
		return nil, fmt.Errorf("localkube: %w", err)
	}
	log.Info("Starting the Kubernetes API server", "version", c.Version, "url", c.URL, "dir", dir)

	if err := c.waitReady(ctx, cfg.ReadyTimeout); err != nil {
		return nil, err
	}
	if err := c.setUpAgent(ctx); err != nil {
		return nil, fmt.Errorf("localkube: set up the agent's service account: %w", err)
	}
	if err := c.writeKubeconfig(); err != nil {
		return nil, fmt.Errorf("localkube: %w", err)
	}
	if cfg.Controllers {
		if err := c.startControllers(cfg.Paths.ControllerManager); err != nil {
			return nil, err
		}
	}
	if cfg.Node {
		if err := c.startNode(ctx, cfg.Paths.Kubelet, cfg.ReadyTimeout); err != nil {
			return nil, err
		}
	}
	log.Info("The Kubernetes API server is ready", "version", c.Version, "url", c.URL,
		"took", time.Since(began).Round(100*time.Millisecond))
	return c, nil
}

// startControllers starts kube-controller-manager as the admin. It serves
// nothing (no port to collide with another cluster's), and leads alone.
// Start doesn't wait for it: its controllers catch up within seconds.
func (c *Cluster) startControllers(path string) error {
	if path == "" {
		return errors.New("localkube: Config.Controllers needs Config.Paths.ControllerManager, which Binaries builds")
	}
	pki := func(name string) string { return filepath.Join(c.Dir, "pki", name) }
	var err error
	c.ctrl, err = startProcess("kube-controller-manager", path, []string{
		"--kubeconfig=" + c.AdminKubeconfig,
		"--secure-port=0",
		"--leader-elect=false",
		// Each namespace's kube-root-ca.crt, as pods expect it.
		"--root-ca-file=" + pki("ca.crt"),
		"--service-account-private-key-file=" + pki("sa.key"),
	}, filepath.Join(c.Dir, "kube-controller-manager.log"))
	if err != nil {
		return fmt.Errorf("localkube: %w", err)
	}
	return nil
}

// apiServerArgs are kube-apiserver's flags. Besides what a secure API
// server needs, they turn off what a one-machine control plane has no use
// for and what slows start-up.
func apiServerArgs(dir, etcdURL, port, auditLog string) []string {
	pki := func(name string) string { return filepath.Join(dir, "pki", name) }
	return []string{
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + port,
		"--etcd-servers=" + etcdURL,
		"--cert-dir=" + filepath.Join(dir, "pki"),
		"--tls-cert-file=" + pki("apiserver.crt"),
		"--tls-private-key-file=" + pki("apiserver.key"),
		"--token-auth-file=" + pki("tokens.csv"),
		"--authorization-mode=Node,RBAC",
		// How the API server calls the node's kubelet (logs, exec, attach,
		// port-forward): at its InternalIP, the only address it reports,
		// checking its certificate against the cluster's CA and showing
		// the client certificate the kubelet demands.
		"--kubelet-preferred-address-types=InternalIP",
		"--kubelet-certificate-authority=" + pki("ca.crt"),
		"--kubelet-client-certificate=" + pki("apiserver-kubelet-client.crt"),
		"--kubelet-client-key=" + pki("apiserver-kubelet-client.key"),
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + pki("sa.pub"),
		"--service-account-signing-key-file=" + pki("sa.key"),
		"--service-cluster-ip-range=" + serviceRange,
		// The `kubernetes` Service's endpoint would be 127.0.0.1, which
		// Endpoints refuse (loopback), and nothing here uses it.
		"--endpoint-reconciler-type=none",
		// No controller-manager makes `default` service accounts; see the
		// package comment.
		"--disable-admission-plugins=ServiceAccount",
		"--audit-policy-file=" + filepath.Join(dir, "audit-policy.yaml"),
		"--audit-log-path=" + auditLog,
		// Blocking, the default, writes each event before the answer, so
		// a test can read the log right after its request.
		"--audit-log-mode=blocking",
		"--profiling=false",
	}
}

func writeAuditPolicy(path string) error {
	const policy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
`
	return os.WriteFile(path, []byte(policy), 0o600)
}

// freePorts asks the kernel for n distinct free ports on 127.0.0.1.
func freePorts(n int) ([]string, error) {
	var ports []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		// Held open until all are picked, so the kernel gives n different ones.
		defer l.Close()
		ports = append(ports, strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
	}
	return ports, nil
}

// waitReady polls /readyz until it answers ok, a child exits, or timeout
// (or ctx) ends the wait.
func (c *Cluster) waitReady(ctx context.Context, timeout time.Duration) error {
	errTimeout := fmt.Errorf("not ready after %s", timeout)
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, errTimeout)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		for _, p := range []*process{c.etcd, c.apiserv} {
			if p.exited() {
				why := errExited
				if b, _ := readTail(p.logPath, 4<<10); containsAddrInUse(b) {
					why = errPortTaken
				}
				return fmt.Errorf("localkube: %s %w (%s); %s", p.name, why, p.exitStatus(), p.tail())
			}
		}
		last = c.readyz(ctx)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("localkube: the Kubernetes API server at %s: %w: %w; %s\n%s",
				c.URL, context.Cause(ctx), last, c.apiserv.tail(), c.etcd.tail())
		case <-tick.C:
		}
	}
}

// containsAddrInUse says whether a child's output says it could not bind.
// Text is all a child's log offers; this only decides whether to retry.
func containsAddrInUse(log []byte) bool {
	return bytes.Contains(log, []byte("address already in use"))
}

// Close stops the node's kubelet (which stops its containers), then
// kube-apiserver, then etcd (SIGTERM, SIGKILL after 5 s each), waits for
// them, and removes the cluster's directory. It may be called more than
// once; later calls return the first call's result.
func (c *Cluster) Close() error {
	c.closeOnce.Do(func() {
		var kubelet *process
		if c.Node != nil {
			kubelet = c.Node.proc
		}
		// The API server before etcd: without etcd it would wait for it.
		for _, p := range []*process{kubelet, c.ctrl, c.apiserv, c.etcd} {
			if p != nil {
				p.stop(5 * time.Second)
			}
		}
		if c.client != nil {
			c.client.CloseIdleConnections()
		}
		if err := os.RemoveAll(c.Dir); err != nil {
			c.closeErr = fmt.Errorf("localkube: %w", err)
		}
		c.owner.Close()
		c.log.Info("Stopped the Kubernetes API server", "url", c.URL)
	})
	return c.closeErr
}
