package localkube

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"time"
)

// NodeName is the name of the node Config.Node starts. Pods run on it when
// their spec.nodeName says so: there is no scheduler.
const NodeName = "localkube-node"

// Node is the cluster's one node: test-kubelet (test/kube/cmd/test-kubelet),
// which registers the Node, runs the containers of the Pods bound to it as
// processes on this machine (images are ignored: a container's command
// runs on the host, so image "busybox" with command ["sh", "-c", "…"] runs
// the host's sh), and serves the kubelet API. Its Pods have IP 127.0.0.1:
// their containers listen on this machine's loopback, where port-forward
// reaches them. The API server's proxies (nodes/proxy, pods/proxy) refuse
// loopback addresses, so they don't reach the node or its Pods.
//
// The API server calls the kubelet at 127.0.0.1 with the client
// certificate --kubelet-client-certificate names, and checks the kubelet's
// serving certificate against the cluster's CA; the kubelet takes no
// other client. The kubelet talks to the API server as the admin.
type Node struct {
	Name string
	// URL is the kubelet's API, https://127.0.0.1:<port>.
	URL string
	// Dir is the kubelet's directory. Each Pod has one in it,
	// pods/<ns>_<pod>_<uid>, its containers' working directory unless
	// they name one, which holds each container run's log in the CRI
	// format as <container>/<n>.log.
	Dir string
	// LogPath is the kubelet's own log, JSON lines. Each exec, attach and
	// port-forward logs a line with msg "stream" that says how it arrived:
	// "upgrade" is "websocket" or "spdy/3.1".
	LogPath string

	proc *process
}

// startNode starts the kubelet and waits until it has registered the Node
// and answers on /healthz with the API server's client certificate (the
// API server's node proxy can't show that: it refuses loopback addresses),
// the kubelet exits, or timeout (or ctx) ends the wait.
func (c *Cluster) startNode(ctx context.Context, kubelet string, timeout time.Duration) error {
	if kubelet == "" {
		return errors.New("localkube: Config.Node needs Config.Paths.Kubelet, the test-kubelet that Binaries builds")
	}
	ports, err := freePorts(1)
	if err != nil {
		return fmt.Errorf("localkube: %w", err)
	}
	addr := net.JoinHostPort("127.0.0.1", ports[0])
	n := &Node{
		Name:    NodeName,
		URL:     "https://" + addr,
		Dir:     filepath.Join(c.Dir, "node"),
		LogPath: filepath.Join(c.Dir, "kubelet.log"),
	}
	pki := func(name string) string { return filepath.Join(c.Dir, "pki", name) }
	n.proc, err = startProcess("test-kubelet", kubelet, []string{
		"--kubeconfig=" + c.AdminKubeconfig,
		"--node-name=" + n.Name,
		"--address=" + addr,
		"--tls-cert-file=" + pki("kubelet.crt"),
		"--tls-private-key-file=" + pki("kubelet.key"),
		"--client-ca-file=" + pki("ca.crt"),
		"--client-common-name=" + kubeletClientName,
		"--root-dir=" + n.Dir,
	}, n.LogPath)
	if err != nil {
		return fmt.Errorf("localkube: %w", err)
	}
	c.Node = n

	client, err := kubeletClient(c.Dir, c.CAPEM)
	if err != nil {
		return fmt.Errorf("localkube: %w", err)
	}
	defer client.CloseIdleConnections()

	errTimeout := fmt.Errorf("not ready after %s", timeout)
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, errTimeout)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		if n.proc.exited() {
			why := errExited
			if b, _ := readTail(n.LogPath, 4<<10); containsAddrInUse(b) {
				why = errPortTaken
			}
			return fmt.Errorf("localkube: test-kubelet %w (%s); %s", why, n.proc.exitStatus(), n.proc.tail())
		}
		last := c.Do(ctx, "GET", "/api/v1/nodes/"+n.Name, nil, nil)
		if last == nil {
			last = healthz(ctx, client, n.URL)
		}
		if last == nil {
			c.log.Info("The node's kubelet is ready", "node", n.Name, "url", n.URL)
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("localkube: the node's kubelet: %w: %w; %s", context.Cause(ctx), last, n.proc.tail())
		case <-tick.C:
		}
	}
}

// kubeletClient returns a client that calls the kubelet as the API server
// does, with the client certificate the cluster's directory holds.
func kubeletClient(dir string, caPEM []byte) (*http.Client, error) {
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "pki", "apiserver-kubelet-client.crt"), filepath.Join(dir, "pki", "apiserver-kubelet-client.key"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	return &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}},
	}}, nil
}

func healthz(ctx context.Context, client *http.Client, base string) error {
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/healthz", nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s/healthz: %d: %s", base, resp.StatusCode, b)
	}
	return nil
}
