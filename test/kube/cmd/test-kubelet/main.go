//go:build unix

// Command test-kubelet is a kubelet for tests: it registers one Node, runs
// the Pods bound to it as processes on this machine, and serves the
// kubelet API, so that `kubectl logs -f`, `exec`, `attach`, `port-forward`
// and `cp` travel client → API server → kubelet as they do in a real
// cluster. internal/localkube builds and starts it.
//
// # Containers are processes
//
// The image is ignored. A container's command and args run directly as a
// process on this machine, under the container's env (with $(VAR)
// references expanded, as the kubelet does) and working directory (by
// default the Pod's directory under --root-dir, which holds its logs): a pod
// with image "busybox" and command ["sh", "-c", "echo hi"] runs the host's
// sh. Without a command, args run as one. The pod's IP and host IP are
// 127.0.0.1, so a container's listening ports are the host's, and
// port-forward dials 127.0.0.1:<port>. Each container is its own process
// group; when its first process ends, the group is killed, as a PID
// namespace would be. When the kubelet stops, it stops them all; if it is
// killed outright, the kernel kills each container's first process with
// it, but what those started lives on until it ends.
//
// Supported: command, args, env (value, fieldRef, secretKeyRef,
// configMapKeyRef), workingDir, stdin, stdinOnce, tty, restartPolicy (with
// a back-off from 1 s to 10 s). Ignored: images, init containers, probes
// (containers are ready while they run), volumes, resources, security
// contexts. Pods are bound by setting spec.nodeName: there is no scheduler.
//
// # The API server and the kubelet API
//
// The kubelet API is served on HTTPS with a serving certificate from the
// cluster's CA, and takes only clients that present a certificate from that
// CA with client-auth usage and the common name given by
// --client-common-name: the API server's --kubelet-client-certificate.
// There is no authorization on top; whoever holds that certificate may do
// everything, which is what the API server needs.
//
// As Kubernetes' own kubelet does, the handlers hand exec, attach and
// port-forward to a CRI streaming server (k8s.io/cri-streaming, the one
// container runtimes embed) on a loopback port, proxying SPDY to it and
// translating WebSocket (v5 remote command, port-forward tunneling) to SPDY
// in front of it. The Node declares the ExtendWebSocketsToKubelet feature,
// so the API server passes WebSocket upgrades through instead of
// translating them itself.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/cri-streaming/pkg/streaming"
)

// options are the command line flags.
type options struct {
	kubeconfig        string
	nodeName          string
	address           string
	certFile          string
	keyFile           string
	clientCAFile      string
	clientName        string
	rootDir           string
	leaseDuration     time.Duration
	shutdownGrace     time.Duration
	declareWebSockets bool
}

func (o *options) register(fs *flag.FlagSet) {
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig for the API server; its user needs rights on nodes, leases, pods, pods/status, secrets and configmaps")
	fs.StringVar(&o.nodeName, "node-name", "", "name of the Node to register")
	fs.StringVar(&o.address, "address", "", "host:port to serve the kubelet API on; the host must be 127.0.0.1, the Node's only address")
	fs.StringVar(&o.certFile, "tls-cert-file", "", "serving certificate, valid for 127.0.0.1")
	fs.StringVar(&o.keyFile, "tls-private-key-file", "", "key of --tls-cert-file")
	fs.StringVar(&o.clientCAFile, "client-ca-file", "", "CA that signs the API server's client certificate")
	fs.StringVar(&o.clientName, "client-common-name", "kube-apiserver-kubelet-client", "common name a client certificate must have; empty takes any from --client-ca-file")
	fs.StringVar(&o.rootDir, "root-dir", "", "directory for the pods' logs")
	fs.DurationVar(&o.leaseDuration, "node-lease-duration", 40*time.Second, "duration of the node's Lease, renewed every quarter of it")
	fs.DurationVar(&o.shutdownGrace, "shutdown-grace", 2*time.Second, "how long containers get between SIGTERM and SIGKILL when the kubelet stops")
	fs.BoolVar(&o.declareWebSockets, "declare-websockets", true, "declare ExtendWebSocketsToKubelet on the Node, so the API server passes WebSocket upgrades through")
}

// validate checks the flags; its errors name the flag.
func (o *options) validate() error {
	var errs []error
	for _, f := range []struct{ name, value string }{
		{"--kubeconfig", o.kubeconfig}, {"--node-name", o.nodeName}, {"--address", o.address},
		{"--tls-cert-file", o.certFile}, {"--tls-private-key-file", o.keyFile},
		{"--client-ca-file", o.clientCAFile}, {"--root-dir", o.rootDir},
	} {
		if f.value == "" {
			errs = append(errs, fmt.Errorf("%s is required", f.name))
		}
	}
	if o.address != "" {
		host, _, err := net.SplitHostPort(o.address)
		if err != nil || host != "127.0.0.1" {
			errs = append(errs, fmt.Errorf("--address=%q: want 127.0.0.1:<port>, the address the Node reports", o.address))
		}
	}
	if o.leaseDuration < 4*time.Second {
		errs = append(errs, fmt.Errorf("--node-lease-duration=%s: want at least 4s", o.leaseDuration))
	}
	return errors.Join(errs...)
}

func main() {
	var o options
	o.register(flag.CommandLine)
	flag.Parse()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if err := o.validate(); err != nil {
		fmt.Fprintf(os.Stderr, "test-kubelet: %v\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, o, log); err != nil {
		log.Error("The test kubelet failed", "err", err)
		os.Exit(1)
	}
}

// run serves until ctx ends, then stops every container and returns.
func run(ctx context.Context, o options, log *slog.Logger) error {
	restCfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return fmt.Errorf("--kubeconfig=%s: %w", o.kubeconfig, err)
	}
	api, err := url.Parse(restCfg.Host)
	if err != nil {
		return fmt.Errorf("--kubeconfig=%s: server %q: %w", o.kubeconfig, restCfg.Host, err)
	}
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	tlsCfg, err := serverTLS(o)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(o.rootDir, "pods"), 0o755); err != nil {
		return err
	}

	k := newKubelet(client, o, api, log)

	// The CRI streaming server listens on loopback without TLS, as
	// container runtimes' do: every URL it serves carries a single-use
	// token the kubelet handlers get from it.
	streamLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	scfg := streaming.DefaultConfig
	scfg.Addr = streamLn.Addr().String()
	streams, err := streaming.NewServer(scfg, k)
	if err != nil {
		streamLn.Close()
		return err
	}
	ln, err := tls.Listen("tcp", o.address, tlsCfg)
	if err != nil {
		streamLn.Close()
		return fmt.Errorf("--address=%s: %w", o.address, err)
	}
	apiSrv := &http.Server{Handler: newServer(k, streams, log).routes(), ReadHeaderTimeout: 30 * time.Second}
	streamSrv := &http.Server{Handler: streams, ReadHeaderTimeout: 30 * time.Second}

	var wg sync.WaitGroup
	serveErr := make(chan error, 2)
	wg.Go(func() { serveErr <- apiSrv.Serve(ln) })
	wg.Go(func() { serveErr <- streamSrv.Serve(streamLn) })
	defer func() {
		// Close, not Shutdown: upgraded connections are hijacked and
		// Shutdown would not end them; the containers are gone by now.
		apiSrv.Close()
		streamSrv.Close()
		wg.Wait()
	}()

	_, port, _ := net.SplitHostPort(o.address)
	runErr := k.run(ctx, port, serveErr)
	log.Info("The test kubelet stopped", "node", o.nodeName)
	return runErr
}

// serverTLS serves the certificate and takes only clients with a
// certificate from the client CA (and the configured common name): the API
// server.
func serverTLS(o options) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(o.certFile, o.keyFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert-file/--tls-private-key-file: %w", err)
	}
	caPEM, err := os.ReadFile(o.clientCAFile)
	if err != nil {
		return nil, fmt.Errorf("--client-ca-file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("--client-ca-file=%s: no PEM certificate in it", o.clientCAFile)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		MinVersion:   tls.VersionTLS12,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if o.clientName == "" {
				return nil
			}
			if cn := cs.PeerCertificates[0].Subject.CommonName; cn != o.clientName {
				return fmt.Errorf("client certificate for %q, want %q", cn, o.clientName)
			}
			return nil
		},
	}, nil
}
