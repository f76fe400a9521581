// Package connectproxy is an HTTP proxy that only tunnels (CONNECT), as a
// corporate proxy in front of the hub would, for tests of agents that must
// go through one.
package connectproxy

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
)

// Proxy is a running proxy.
type Proxy struct {
	URL       *url.URL
	tunnelled atomic.Int32
}

// Tunnelled is how many connections the proxy has carried.
func (p *Proxy) Tunnelled() int { return int(p.tunnelled.Load()) }

// Start runs a proxy until the test ends. Anything but CONNECT is answered
// with 405.
func Start(t testing.TB) *Proxy {
	t.Helper()
	p := &Proxy{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodConnect {
			http.Error(w, "CONNECT only", http.StatusMethodNotAllowed)
			return
		}
		up, err := net.Dial("tcp", r.Host)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer up.Close()
		p.tunnelled.Add(1)
		w.WriteHeader(http.StatusOK)
		down, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer down.Close()
		go func() {
			io.Copy(up, buf)
			up.(*net.TCPConn).CloseWrite()
		}()
		io.Copy(down, up)
	}))
	t.Cleanup(srv.Close)
	p.URL, _ = url.Parse(srv.URL)
	return p
}
