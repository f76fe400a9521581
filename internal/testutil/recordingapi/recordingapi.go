// Package recordingapi is an HTTPS server for tests that stands where an
// API server (or anything a redirect points at) would: it records every
// request it gets, headers, path as sent and bearer token included, and
// answers whatever the test tells it to, a redirect to anywhere among
// them. A test then asks what reached it: whether a person's token ever
// arrived where it must not.
//
// It serves a certificate from a CA of its own, for kubernetes.default.svc
// and 127.0.0.1, so the hub (through an agent, or directly) trusts it as a
// cluster's API server; with Config.Plain it serves plain HTTP instead, as
// the "other host" a hostile redirect names.
package recordingapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/pki"
)

// Config says how a Server serves.
type Config struct {
	// Hosts are the names and addresses its certificate is for; none means
	// kubernetes.default.svc and 127.0.0.1.
	Hosts []string
	// Plain serves HTTP without TLS.
	Plain bool
}

// Request is one request as the server got it.
type Request struct {
	Method  string
	Host    string
	Path    string // decoded
	RawPath string // as sent: EscapedPath, so %2F stays %2F
	Query   string // raw
	Header  http.Header
	// Bearer is the token of an Authorization: Bearer header, "" when none.
	Bearer string
	Body   []byte // up to maxBody
	Proto  string
	Remote string
}

// maxBody is the most of a request's body a Server keeps.
const maxBody = 1 << 20

// Server is a running recording server.
type Server struct {
	// URL is where it listens: https://127.0.0.1:<port>, or http:// when
	// Plain.
	URL string
	// Addr is its host:port.
	Addr string
	// CAPEM is the PEM certificate of the CA that signed its certificate;
	// nil when Plain.
	CAPEM []byte

	srv *httptest.Server

	mu       sync.Mutex // guards the following
	requests []Request
	answers  map[string]http.Handler
	changed  chan struct{} // closed and replaced on each request
}

// Start runs a server until the test ends.
func Start(t testing.TB, cfg Config) *Server {
	t.Helper()
	s := &Server{answers: map[string]http.Handler{}, changed: make(chan struct{})}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	if cfg.Plain {
		s.srv.Start()
	} else {
		hosts := cfg.Hosts
		if len(hosts) == 0 {
			hosts = []string{"kubernetes.default.svc", "127.0.0.1"}
		}
		ca, err := pki.NewCA("recording API server CA", 24*time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		cert, err := ca.IssueTLS(pki.Leaf{CommonName: "recording API server", Hosts: hosts})
		if err != nil {
			t.Fatal(err)
		}
		s.CAPEM = ca.CertPEM
		s.srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
		s.srv.StartTLS()
	}
	t.Cleanup(s.srv.Close)
	s.URL = s.srv.URL
	s.Addr = s.srv.Listener.Addr().String()
	return s
}

// Answer makes the server answer requests for path with h: path exactly,
// or every path under it when it ends in "/". A later Answer for the same
// path replaces the earlier one; the longest matching path wins. Requests
// no Answer covers get 200 with a JSON echo of what was asked.
func (s *Server) Answer(path string, h http.Handler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answers[path] = h
}

// Redirect answers with status code and exactly location as the Location
// header, as a hostile server sends it (http.Redirect would clean it).
func Redirect(code int, location string) http.Handler {
	return Reply(code, http.Header{"Location": {location}}, "")
}

// Reply answers with status code, header and body.
func Reply(code int, header http.Header, body string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, vs := range header {
			w.Header()[k] = append([]string(nil), vs...)
		}
		w.WriteHeader(code)
		io.WriteString(w, body)
	})
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, maxBody))
	rec := Request{
		Method: r.Method, Host: r.Host, Path: r.URL.Path, RawPath: r.URL.EscapedPath(), Query: r.URL.RawQuery,
		Header: r.Header.Clone(), Body: body, Proto: r.Proto, Remote: r.RemoteAddr,
	}
	if a := r.Header.Get("Authorization"); len(a) > len("bearer ") && strings.EqualFold(a[:len("bearer ")], "bearer ") {
		rec.Bearer = a[len("bearer "):]
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	s.mu.Lock()
	s.requests = append(s.requests, rec)
	close(s.changed)
	s.changed = make(chan struct{})
	h := s.answerLocked(r.URL.Path)
	s.mu.Unlock()
	if h != nil {
		h.ServeHTTP(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"method": r.Method, "path": r.URL.EscapedPath(), "query": r.URL.RawQuery, "host": r.Host})
}

func (s *Server) answerLocked(path string) http.Handler {
	if h, ok := s.answers[path]; ok {
		return h
	}
	var best string
	var h http.Handler
	for p, a := range s.answers {
		if strings.HasSuffix(p, "/") && strings.HasPrefix(path, p) && len(p) > len(best) {
			best, h = p, a
		}
	}
	return h
}

// Requests returns every request the server has had, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Bearers returns the bearer tokens the server has been sent, in order.
func (s *Server) Bearers() []string {
	var out []string
	for _, r := range s.Requests() {
		if r.Bearer != "" {
			out = append(out, r.Bearer)
		}
	}
	return out
}

// Saw reports whether token reached the server anywhere in a request:
// a header (Authorization or any other), the path, the query or the body.
func (s *Server) Saw(token string) bool {
	if token == "" {
		return false
	}
	for _, r := range s.Requests() {
		if strings.Contains(r.RawPath, token) || strings.Contains(r.Query, token) || bytes.Contains(r.Body, []byte(token)) {
			return true
		}
		for _, vs := range r.Header {
			for _, v := range vs {
				if strings.Contains(v, token) {
					return true
				}
			}
		}
	}
	return false
}

// Wait waits until cond holds for the requests so far, or ctx ends.
func (s *Server) Wait(ctx context.Context, cond func([]Request) bool) error {
	for {
		s.mu.Lock()
		ok, changed := cond(append([]Request(nil), s.requests...)), s.changed
		s.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Client returns an HTTP client that trusts the server's certificate and
// follows no redirects.
func (s *Server) Client() *http.Client {
	c := s.srv.Client()
	if s.CAPEM != nil {
		tr := c.Transport.(*http.Transport).Clone()
		tr.TLSClientConfig = &tls.Config{RootCAs: poolOf(s.CAPEM)}
		c = &http.Client{Transport: tr}
	}
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return c
}

// WriteServiceAccount writes into dir what a pod's service account
// directory holds for an agent: the server's CA as ca.crt, and token.
func (s *Server) WriteServiceAccount(dir, token string) error {
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), s.CAPEM, 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "token"), []byte(token), 0o600)
}

func poolOf(pem []byte) *x509.CertPool {
	p := x509.NewCertPool()
	p.AppendCertsFromPEM(pem)
	return p
}
