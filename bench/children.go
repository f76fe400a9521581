package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"sync"
	"syscall"

	"github.com/tetherhq/tether/internal/agent"
	"github.com/tetherhq/tether/internal/hub"
	"github.com/tetherhq/tether/internal/tunnel"
)

// runChild runs one role in a process of its own and returns its exit code.
func runChild(role string, args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if dir := os.Getenv("BENCH_CPUPROFILE_DIR"); dir != "" {
		// For finding where the time goes: `go tool pprof` on the file.
		if f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d.pprof", role, os.Getpid()))); err == nil {
			pprof.StartCPUProfile(f)
			defer pprof.StopCPUProfile()
		}
	}
	if dir := os.Getenv("BENCH_ALLOCS_DIR"); dir != "" {
		// For finding what allocates: `go tool pprof -sample_index=alloc_space`
		// on the file, written as the child ends; with BENCH_MEMPROFILERATE
		// for the hub, to sample more than one allocation per 512 KiB.
		defer func() {
			if f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d.allocs", role, os.Getpid()))); err == nil {
				pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
		}()
	}
	if dir := os.Getenv("BENCH_TRACE_DIR"); dir != "" {
		// For finding where a request waits: `go tool trace` on the file.
		if f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d.trace", role, os.Getpid()))); err == nil {
			trace.Start(f)
			defer trace.Stop()
		}
	}
	var err error
	switch role {
	case "tunnel-hub":
		err = tunnelHub(ctx, args)
	case "tunnel-agent":
		err = tunnelAgent(ctx, args)
	case "relay":
		err = relay(ctx, args)
	case "proxy":
		err = proxyChild(ctx, args)
	case "hub":
		err = hubChild(ctx, args)
	case "agents":
		err = agentsChild(ctx, args)
	default:
		err = fmt.Errorf("no role %q", role)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		log.Printf("%s: %v", role, err)
		return 1
	}
	return 0
}

func loadPool(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("no certificates in %s", path)
	}
	return p, nil
}

// innerTLS is the TLS the hub runs inside a stream to the API server: checked
// against the cluster's CA as kubernetes.default.svc.
func innerTLS(caFile string) (*tls.Config, error) {
	if caFile == "" {
		return nil, nil
	}
	pool, err := loadPool(caFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: pool, ServerName: hub.APIServerName, MinVersion: tls.VersionTLS12}, nil
}

// tunnelHub is the hub's end of a bare tunnel: it accepts one agent's
// WebSocket, and relays each TCP connection to its front address over a
// new stream, with TLS inside the stream when -inner-ca is set, as the hub
// does to an API server.
func tunnelHub(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("tunnel-hub", flag.ExitOnError)
	cert := fs.String("cert", "", "serve wss with this certificate")
	key := fs.String("key", "", "and this key")
	innerCA := fs.String("inner-ca", "", "run TLS inside each stream, trusting this CA")
	fs.Parse(args)
	inner, err := innerTLS(*innerCA)
	if err != nil {
		return err
	}
	sessions := make(chan *tunnel.Session, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("/api/agent", func(w http.ResponseWriter, r *http.Request) {
		s, err := tunnel.Accept(w, r, tunnel.DefaultConfig())
		if err != nil {
			return
		}
		sessions <- s
		<-s.Done()
	})
	wsLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux}
	scheme := "ws"
	go func() {
		if *cert != "" {
			srv.ServeTLS(wsLn, *cert, *key)
		} else {
			srv.Serve(wsLn)
		}
	}()
	if *cert != "" {
		scheme = "wss"
	}
	front, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Printf("READY %s://%s/api/agent %s\n", scheme, wsLn.Addr(), front.Addr())
	var sess *tunnel.Session
	select {
	case sess = <-sessions:
	case <-ctx.Done():
		return nil
	}
	go func() { <-ctx.Done(); front.Close(); sess.Close() }()
	for {
		c, err := front.Accept()
		if err != nil {
			return nil
		}
		go func() {
			defer c.Close()
			st, err := sess.Open(ctx)
			if err != nil {
				return
			}
			up, err := overTLS(ctx, st, inner, false)
			if err != nil {
				return
			}
			splice(c, up, false)
		}()
	}
}

// tunnelAgent is the agent's end: it dials the hub and relays each stream to
// -target, as the agent relays to its API server.
func tunnelAgent(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("tunnel-agent", flag.ExitOnError)
	url := fs.String("url", "", "the hub's WebSocket")
	target := fs.String("target", "", "where streams go")
	ca := fs.String("ca", "", "the hub's CA, for wss")
	plainCopy := fs.Bool("plain-copy", false, "relay with io.Copy both ways, not the agent's Splice (for A/B runs)")
	fs.Parse(args)
	var opts tunnel.DialOptions
	if *ca != "" {
		pool, err := loadPool(*ca)
		if err != nil {
			return err
		}
		opts.TLSConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	sess, _, err := tunnel.Dial(ctx, *url, opts, tunnel.DefaultConfig())
	if err != nil {
		return err
	}
	defer sess.Close()
	fmt.Println("READY")
	for {
		st, err := sess.Accept(ctx)
		if err != nil {
			return nil
		}
		go func() {
			defer st.Close()
			var d net.Dialer
			api, err := d.DialContext(ctx, "tcp", *target)
			if err != nil {
				return
			}
			if *plainCopy {
				splice(st, api, false)
				return
			}
			agent.Splice(st, api) // the agent's own relay
		}()
	}
}

// relay is one process of a plain two-process TCP relay: no multiplexing,
// one upstream connection per connection. With -inner-ca, it runs TLS to
// the upstream, like tunnelHub. With -link-cert (the front relay) and
// -link-ca (the back one), the two relays also run TLS between them, the
// front one serving it as the hub serves wss and the back one its client as
// the agent is, so the pair makes the same AES-GCM passes per byte as the
// tunnel with production TLS: the wss sealed and opened, and the API
// server's TLS opened in front.
func relay(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("relay", flag.ExitOnError)
	target := fs.String("target", "", "upstream")
	innerCA := fs.String("inner-ca", "", "run TLS to the upstream, trusting this CA")
	userCopy := fs.Bool("copy", false, "copy through a buffer in user space, as anything that frames or masks the bytes must, instead of letting the kernel splice")
	linkCert := fs.String("link-cert", "", "serve TLS on each upstream connection with this certificate (the hub's end of the wss), under -inner-ca's")
	linkKey := fs.String("link-key", "", "and this key")
	linkCA := fs.String("link-ca", "", "run TLS as the client on each accepted connection, trusting this CA for localhost (the agent's end of the wss)")
	fs.Parse(args)
	inner, err := innerTLS(*innerCA)
	if err != nil {
		return err
	}
	var linkServer, linkClient *tls.Config
	if *linkCert != "" {
		cert, err := tls.LoadX509KeyPair(*linkCert, *linkKey)
		if err != nil {
			return err
		}
		linkServer = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	if *linkCA != "" {
		pool, err := loadPool(*linkCA)
		if err != nil {
			return err
		}
		linkClient = &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Printf("READY %s\n", ln.Addr())
	go func() { <-ctx.Done(); ln.Close() }()
	for {
		c, err := ln.Accept()
		if err != nil {
			return nil
		}
		go func() {
			defer c.Close()
			down, err := overTLS(ctx, c, linkClient, false)
			if err != nil {
				return
			}
			var d net.Dialer
			up, err := d.DialContext(ctx, "tcp", *target)
			if err != nil {
				return
			}
			if up, err = overTLS(ctx, up, linkServer, true); err != nil {
				return
			}
			if up, err = overTLS(ctx, up, inner, false); err != nil {
				return
			}
			splice(down, up, *userCopy)
		}()
	}
}

// overTLS runs TLS over c with cfg, as the server or the client, and closes c
// if the handshake fails; with a nil cfg it returns c.
func overTLS(ctx context.Context, c net.Conn, cfg *tls.Config, server bool) (net.Conn, error) {
	if cfg == nil {
		return c, nil
	}
	t := tls.Client(c, cfg)
	if server {
		t = tls.Server(c, cfg)
	}
	if err := t.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return t, nil
}

// splice copies both ways, passing half-closes on, like the agent's relay.
// With userCopy the bytes pass through 256 KiB buffers in this process, as
// they must for anything that frames or masks them; otherwise io.Copy lets
// the kernel move them from socket to socket (splice(2)).
func splice(a, b net.Conn, userCopy bool) {
	var once sync.Once
	abort := func() { once.Do(func() { a.Close(); b.Close() }) }
	var wg sync.WaitGroup
	wg.Add(2)
	cp := func(dst, src net.Conn) {
		defer wg.Done()
		var err error
		if userCopy {
			_, err = io.CopyBuffer(dst, struct{ io.Reader }{src}, make([]byte, 256<<10))
		} else {
			_, err = io.Copy(dst, src)
		}
		if err != nil {
			abort()
			return
		}
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		} else {
			dst.Close()
		}
	}
	go cp(a, b)
	go cp(b, a)
	wg.Wait()
	a.Close()
	b.Close()
}

// proxyChild is a plain HTTP reverse proxy, net/http's own with nothing
// added: HTTP/2 or HTTP/1.1 from the client over TLS, HTTP/1.1 over TLS to
// the target, connections kept. In front of a replica it is the floor of
// what a replica forwarding to another adds: one hop of HTTP with TLS on
// both sides.
func proxyChild(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("proxy", flag.ExitOnError)
	target := fs.String("target", "", "the upstream's host:port, HTTPS")
	ca := fs.String("ca", "", "the CA the upstream's certificate chains to")
	cert := fs.String("cert", "", "the certificate served")
	key := fs.String("key", "", "and its key")
	fs.Parse(args)
	pool, err := loadPool(*ca)
	if err != nil {
		return err
	}
	pair, err := tls.LoadX509KeyPair(*cert, *key)
	if err != nil {
		return err
	}
	upstream := &url.URL{Scheme: "https", Host: *target}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(upstream) },
		Transport: &http.Transport{
			TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
			DisableCompression:  true,
			MaxIdleConnsPerHost: 64,
			ForceAttemptHTTP2:   false,
			TLSNextProto:        map[string]func(string, *tls.Conn) http.RoundTripper{},
		},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: proxy, TLSConfig: &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}}
	fmt.Printf("READY %s\n", ln.Addr())
	go func() { <-ctx.Done(); srv.Close() }()
	if err := srv.ServeTLS(ln, "", ""); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
