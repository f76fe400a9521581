package hub

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/gather"
)

// apiServer is a TLS server for apiClient's tests that counts the
// connections it has open and has had.
type apiServer struct {
	srv    *httptest.Server
	opened atomic.Int64
	open   atomic.Int64
	dials  atomic.Int64
}

func newAPIServer(t *testing.T, handler http.HandlerFunc) *apiServer {
	t.Helper()
	s := &apiServer{srv: httptest.NewUnstartedServer(handler)}
	s.srv.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		switch state {
		case http.StateNew:
			s.opened.Add(1)
			s.open.Add(1)
		case http.StateClosed, http.StateHijacked:
			s.open.Add(-1)
		}
	}
	s.srv.StartTLS()
	t.Cleanup(s.srv.Close)
	return s
}

// client makes an apiClient to s, as the hub makes one to a cluster.
func (s *apiServer) client(t *testing.T, idleTimeout time.Duration) *apiClient {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(s.srv.Certificate())
	cfg := &tls.Config{RootCAs: roots, ServerName: "example.com"}
	c := &apiClient{idleTimeout: idleTimeout, dial: func(ctx context.Context) (*tls.Conn, error) {
		s.dials.Add(1)
		d := tls.Dialer{Config: cfg}
		conn, err := d.DialContext(ctx, "tcp", s.srv.Listener.Addr().String())
		if err != nil {
			return nil, err
		}
		return conn.(*tls.Conn), nil
	}}
	t.Cleanup(c.close)
	return c
}

func (s *apiServer) get(t *testing.T, c http.RoundTripper, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", "https://"+APIServerName+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.RoundTrip(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading the body: %v", path, err)
	}
	return resp.StatusCode, string(body)
}

func (c *apiClient) idleCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.idle)
}

func TestReplayable(t *testing.T) {
	for _, tc := range []struct {
		method, upgrade string
		body            io.Reader
		want            bool
	}{
		{method: "GET", want: true},
		{method: "HEAD", want: true},
		{method: "OPTIONS", want: true},
		{method: "GET", upgrade: "SPDY/3.1"},
		{method: "GET", body: strings.NewReader("x")},
		{method: "DELETE"},
		{method: "POST"},
		{method: "PATCH", body: strings.NewReader("{}")},
	} {
		req, _ := http.NewRequest(tc.method, "https://"+APIServerName+"/", tc.body)
		if tc.upgrade != "" {
			req.Header.Set("Upgrade", tc.upgrade)
		}
		if got := replayable(req); got != tc.want {
			t.Errorf("%s (upgrade %q, body %v): replayable %v, want %v", tc.method, tc.upgrade, tc.body != nil, got, tc.want)
		}
	}
}

func TestClientReusesAConnection(t *testing.T) {
	s := newAPIServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/empty":
			w.WriteHeader(http.StatusNoContent)
		case "/chunked":
			io.WriteString(w, "a")
			w.(http.Flusher).Flush()
			io.WriteString(w, "b")
		default:
			io.WriteString(w, r.URL.Path)
		}
	})
	c := s.client(t, time.Minute)
	for _, path := range []string{"/a", "/empty", "/chunked", "/b"} {
		code, body := s.get(t, c, path)
		want := map[string]string{"/empty": "", "/chunked": "ab"}[path]
		if want == "" && path != "/empty" {
			want = path
		}
		if body != want {
			t.Errorf("GET %s: %d %q, want %q", path, code, body, want)
		}
	}
	req, _ := http.NewRequest("HEAD", "https://"+APIServerName+"/head", nil)
	resp, err := c.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := s.opened.Load(); got != 1 {
		t.Errorf("%d connections for five requests one after another, want 1", got)
	}
	if got := c.idleCount(); got != 1 {
		t.Errorf("%d idle connections, want 1", got)
	}
}

func TestClientKeepsAtMostItsLimit(t *testing.T) {
	const n = maxIdleAPIConns + 8
	var arrived sync.WaitGroup
	arrived.Add(n)
	s := newAPIServer(t, func(w http.ResponseWriter, r *http.Request) {
		arrived.Done()
		arrived.Wait() // all n at once: n connections
		io.WriteString(w, "ok")
	})
	c := s.client(t, time.Minute)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if code, body := s.get(t, c, "/"); code != 200 || body != "ok" {
				t.Errorf("GET: %d %q", code, body)
			}
		})
	}
	wg.Wait()
	if got := c.idleCount(); got != maxIdleAPIConns {
		t.Errorf("%d idle connections, want %d", got, maxIdleAPIConns)
	}
	eventually(t, 5*time.Second, "the API server sees the connections beyond the limit closed", func() bool {
		return s.open.Load() == maxIdleAPIConns
	})
}

func TestClientClosesIdleConnections(t *testing.T) {
	s := newAPIServer(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	c := s.client(t, 100*time.Millisecond)
	s.get(t, c, "/")
	eventually(t, 5*time.Second, "the idle connection closed after its timeout", func() bool { return s.open.Load() == 0 })
	if got := c.idleCount(); got != 0 {
		t.Errorf("%d idle connections after the timeout, want 0", got)
	}

	// close closes the idle ones, and keeps none after.
	c = s.client(t, time.Minute)
	s.get(t, c, "/")
	c.close()
	eventually(t, 5*time.Second, "close closed the idle connection", func() bool { return s.open.Load() == 0 })
	s.get(t, c, "/")
	eventually(t, 5*time.Second, "a connection freed after close is closed", func() bool { return s.open.Load() == 0 })
}

// TestSmallAnswersLeaveALargeAnswersConnection: requests for small answers
// every so often (the probes) don't take the connection a large answer
// came on, so it expires, and they keep one of their own.
func TestSmallAnswersLeaveALargeAnswersConnection(t *testing.T) {
	s := newAPIServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/large" {
			w.Write(make([]byte, 4*largeAnswer))
			return
		}
		io.WriteString(w, "ok")
	})
	// A gap between small answers longer than this would let their own
	// connection expire: a loaded machine's sleeps ran 250 ms late.
	const idle = time.Second
	c := s.client(t, idle)
	small := c.small()
	s.get(t, small, "/")
	s.get(t, c, "/large") // on the small answers' connection, kept after
	if got := s.dials.Load(); got != 1 {
		t.Fatalf("%d connections for two requests one after another, want 1", got)
	}
	// Small answers every idle/6 for twice the idle timeout.
	for range 12 {
		if code, body := s.get(t, small, "/"); code != 200 || body != "ok" {
			t.Fatalf("GET /: %d %q", code, body)
		}
		time.Sleep(idle / 6)
	}
	if got := s.dials.Load(); got != 2 {
		t.Errorf("%d connections made, want 2: the large answer's and one for the small answers after it", got)
	}
	eventually(t, 5*time.Second, "the large answer's connection expired", func() bool { return s.open.Load() == 1 })

	// Other requests take any connection, the most recently used first.
	s.get(t, c, "/large")
	s.get(t, c, "/")
	if got := s.dials.Load(); got != 2 {
		t.Errorf("%d connections made, want still 2", got)
	}
}

// heldClose is a connection whose Close waits for release.
type heldClose struct {
	net.Conn
	closing chan struct{} // closed when Close begins
	release chan struct{}
	once    sync.Once
}

func (c *heldClose) Close() error {
	c.once.Do(func() { close(c.closing) })
	<-c.release
	return c.Conn.Close()
}

// TestClientCloseWaitsForExpiry: the goroutine that closes a connection
// whose idle timeout passed belongs to the client, whose close waits for
// it.
func TestClientCloseWaitsForExpiry(t *testing.T) {
	s := newAPIServer(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	c := s.client(t, 10*time.Millisecond)
	roots := x509.NewCertPool()
	roots.AddCert(s.srv.Certificate())
	held := &heldClose{closing: make(chan struct{}), release: make(chan struct{})}
	c.dial = func(ctx context.Context) (*tls.Conn, error) {
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", s.srv.Listener.Addr().String())
		if err != nil {
			return nil, err
		}
		held.Conn = conn
		tc := tls.Client(held, &tls.Config{RootCAs: roots, ServerName: "example.com"})
		return tc, tc.HandshakeContext(ctx)
	}
	s.get(t, c, "/")
	select {
	case <-held.closing: // the idle timeout's expire is closing it
	case <-time.After(5 * time.Second):
		t.Fatal("the idle connection wasn't closed after its timeout")
	}
	closed := make(chan struct{})
	go func() {
		c.close()
		close(closed)
	}()
	select {
	case <-closed:
		t.Error("close returned while the connection's expiry was still closing it")
	case <-time.After(100 * time.Millisecond):
	}
	close(held.release)
	<-closed
}

func TestClientSendsAgainOnAClosedKeptConnection(t *testing.T) {
	s := newAPIServer(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	c := s.client(t, time.Minute)
	s.get(t, c, "/")
	// The API server closes its idle connections, as one restarting does.
	s.srv.CloseClientConnections()
	eventually(t, 5*time.Second, "the API server closed the connection", func() bool { return s.open.Load() == 0 })
	if code, body := s.get(t, c, "/"); code != 200 || body != "ok" {
		t.Fatalf("GET after the API server closed the kept connection: %d %q", code, body)
	}
	if got := s.dials.Load(); got != 2 {
		t.Errorf("%d dials, want 2: the request went again on a new connection", got)
	}

	// A new connection that fails is not tried again.
	c = s.client(t, time.Minute)
	dials := s.dials.Load()
	fails := newAPIServer(t, func(w http.ResponseWriter, r *http.Request) {
		conn, _, _ := http.NewResponseController(w).Hijack()
		conn.Close()
	})
	c.dial = fails.client(t, time.Minute).dial
	req, _ := http.NewRequest("GET", "https://"+APIServerName+"/", nil)
	if _, err := c.RoundTrip(req); err == nil {
		t.Fatal("no error from an API server that closed the connection")
	}
	if got := fails.dials.Load(); got != 1 || s.dials.Load() != dials {
		t.Errorf("%d dials for a request on a new connection that failed, want 1", got)
	}
}

func TestClientDoesNotReuseAConnectionCutShort(t *testing.T) {
	s := newAPIServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/close":
			w.Header().Set("Connection", "close")
		case "/half":
			// Half of what it says, then nothing: nothing waits unread.
			w.Header().Set("Content-Length", "8")
			io.WriteString(w, "half")
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		w.Write(make([]byte, 64<<10))
	})
	c := s.client(t, time.Minute)
	// A body closed before its end: the rest is not drained (a watch may
	// never end), so the connection can't be used again. Whether some of
	// the rest had come or not.
	for _, path := range []string{"/", "/half"} {
		req, _ := http.NewRequest("GET", "https://"+APIServerName+path, nil)
		resp, err := c.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(resp.Body, make([]byte, 4)); err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := c.idleCount(); got != 0 {
			t.Fatalf("%s: %d idle connections after a body closed before its end, want 0", path, got)
		}
	}
	// An answer that says the connection closes.
	s.get(t, c, "/close")
	if got := c.idleCount(); got != 0 {
		t.Errorf("%d idle connections, want 0", got)
	}
	eventually(t, 5*time.Second, "the three connections closed", func() bool { return s.open.Load() == 0 })
}

func TestClientRequestEndClosesTheConnection(t *testing.T) {
	// /slow answers only once released, even after its client has gone, so
	// that no answer can race the request's end.
	release := make(chan struct{})
	s := newAPIServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-release
			return
		}
		io.WriteString(w, "event 1\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // before the server's Close, which waits for /slow
	c := s.client(t, time.Minute)

	// Waiting for the answer's head.
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "https://"+APIServerName+"/slow", nil)
	if _, err := c.RoundTrip(req); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a request whose context ended: %v, want %v", err, context.DeadlineExceeded)
	}
	free()

	// Reading a watch.
	ctx, cancel = context.WithCancel(t.Context())
	req, _ = http.NewRequestWithContext(ctx, "GET", "https://"+APIServerName+"/watch", nil)
	resp, err := c.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8)
	if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "event 1\n" {
		t.Fatalf("first event: %q, %v", buf, err)
	}
	read := make(chan error, 1)
	go func() {
		_, err := resp.Body.Read(buf)
		read <- err
	}()
	cancel()
	if err := <-read; err == nil {
		t.Error("a watch's read went on after its request's context ended")
	}
	resp.Body.Close()
	eventually(t, 5*time.Second, "both connections closed", func() bool { return s.open.Load() == 0 })
	if got := c.idleCount(); got != 0 {
		t.Errorf("%d idle connections, want 0", got)
	}
}

func TestClientPassesInformationalAnswersOn(t *testing.T) {
	s := newAPIServer(t, func(w http.ResponseWriter, r *http.Request) {
		for range 3 {
			w.Header().Set("Link", "</style.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
		}
		if r.URL.Path == "/endless" {
			for range maxInformational {
				w.WriteHeader(http.StatusEarlyHints)
			}
		}
		io.WriteString(w, "answer")
	})
	c := s.client(t, time.Minute)
	var got []string
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		got = append(got, h.Get("Link"))
		return nil
	}}
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), trace), "GET", "https://"+APIServerName+"/", nil)
	resp, err := c.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "answer" || len(got) != 3 || got[0] != "</style.css>; rel=preload" {
		t.Errorf("got %d %q after 1xx answers %q; want 200 \"answer\" after three", resp.StatusCode, body, got)
	}
	req, _ = http.NewRequest("GET", "https://"+APIServerName+"/endless", nil)
	if _, err := c.RoundTrip(req); !errors.Is(err, errTooManyInformational) {
		t.Errorf("eight 1xx answers: %v, want %v", err, errTooManyInformational)
	}
}

// holdListener wraps accepted connections in a gather.Conn, so that a
// handler can send two TLS records in one write.
type holdListener struct{ net.Listener }

func (l holdListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &gather.Conn{Conn: c}, nil
}

// TestClientDropsAnAnswerNoOneAskedFor: an API server sends a
// second answer no one asked for right after the first, in a TLS record of
// its own that arrives with the first. crypto/tls reads it ahead into its
// own buffer; apiClient looks only at its bufio reader (and the tunnel
// stream), keeps the connection, and gives that answer to the next request.
// net/http's transport would see it on the idle connection and close it.
// TestClientDropsAnAnswerNoOneAskedFor: bytes the API server sent after an
// answer, in the same write as its end, wait inside crypto/tls, where
// neither the bufio reader nor the stream shows them: the connection is
// not kept, or the next request, perhaps another person's, gets them as
// its answer (net/http's transport closes such a connection too).
func TestClientDropsAnAnswerNoOneAskedFor(t *testing.T) {
	s := &apiServer{srv: httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/first" {
			io.WriteString(w, "fresh")
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		g := conn.(*tls.Conn).NetConn().(*gather.Conn)
		g.Hold()
		io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst")
		io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstale")
		g.Release()
		for { // later requests on this connection get their own answers
			if _, err := http.ReadRequest(brw.Reader); err != nil {
				return
			}
			io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfresh")
		}
	}))}
	s.srv.Listener = holdListener{s.srv.Listener}
	s.srv.StartTLS()
	t.Cleanup(s.srv.Close)
	c := s.client(t, time.Minute)
	if _, body := s.get(t, c, "/first"); body != "first" {
		t.Fatalf("first answer %q", body)
	}
	if _, body := s.get(t, c, "/second"); body != "fresh" {
		t.Errorf("the second request got %q, an answer sent for no request; want %q", body, "fresh")
	}
}
