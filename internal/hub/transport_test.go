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
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/gather"
)

// apiServer is a TLS server for the tests of the transport to API servers that counts the
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

// transport makes a transport to s as the hub makes one to a cluster
// (NewAPITransport), with TLS straight to s instead of through a tunnel.
func (s *apiServer) transport(t *testing.T, idleTimeout time.Duration) *http.Transport {
	t.Helper()
	tr := NewAPITransport(s.dialer(), idleTimeout)
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// dialer dials s, counting its dials.
func (s *apiServer) dialer() func(context.Context) (net.Conn, error) {
	roots := x509.NewCertPool()
	roots.AddCert(s.srv.Certificate())
	cfg := &tls.Config{RootCAs: roots, ServerName: "example.com"}
	return func(ctx context.Context) (net.Conn, error) {
		s.dials.Add(1)
		d := tls.Dialer{Config: cfg}
		return d.DialContext(ctx, "tcp", s.srv.Listener.Addr().String())
	}
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

func TestTransportReusesAConnection(t *testing.T) {
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
	c := s.transport(t, time.Minute)
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
	if got := s.open.Load(); got != 1 {
		t.Errorf("%d connections open, want 1 kept", got)
	}
}

func TestTransportKeepsAtMostItsLimit(t *testing.T) {
	const n = maxIdleAPIConns + 8
	var arrived sync.WaitGroup
	arrived.Add(n)
	s := newAPIServer(t, func(w http.ResponseWriter, r *http.Request) {
		arrived.Done()
		arrived.Wait() // all n at once: n connections
		io.WriteString(w, "ok")
	})
	c := s.transport(t, time.Minute)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if code, body := s.get(t, c, "/"); code != 200 || body != "ok" {
				t.Errorf("GET: %d %q", code, body)
			}
		})
	}
	wg.Wait()
	eventually(t, 5*time.Second, "the API server sees the connections beyond the limit closed", func() bool {
		return s.open.Load() == maxIdleAPIConns
	})
}

func TestTransportClosesIdleConnections(t *testing.T) {
	s := newAPIServer(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	c := s.transport(t, 100*time.Millisecond)
	s.get(t, c, "/")
	eventually(t, 5*time.Second, "the idle connection closed after its timeout", func() bool { return s.open.Load() == 0 })

	// closeIdleConnections, as a connection's end calls it, closes the
	// idle ones.
	c = s.transport(t, time.Minute)
	s.get(t, c, "/")
	c.CloseIdleConnections()
	eventually(t, 5*time.Second, "the idle connection closed", func() bool { return s.open.Load() == 0 })
}

func TestTransportSendsAgainOnAClosedKeptConnection(t *testing.T) {
	s := newAPIServer(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	c := s.transport(t, time.Minute)
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
	dials := s.dials.Load()
	fails := newAPIServer(t, func(w http.ResponseWriter, r *http.Request) {
		conn, _, _ := http.NewResponseController(w).Hijack()
		conn.Close()
	})
	c = fails.transport(t, time.Minute)
	req, _ := http.NewRequest("GET", "https://"+APIServerName+"/", nil)
	if _, err := c.RoundTrip(req); err == nil {
		t.Fatal("no error from an API server that closed the connection")
	}
	if got := fails.dials.Load(); got != 1 || s.dials.Load() != dials {
		t.Errorf("%d dials for a request on a new connection that failed, want 1", got)
	}
}

func TestTransportDoesNotReuseAConnectionCutShort(t *testing.T) {
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
	c := s.transport(t, time.Minute)
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
		eventually(t, 5*time.Second, path+": the connection of a body closed before its end closed", func() bool { return s.open.Load() == 0 })
	}
	// An answer that says the connection closes.
	s.get(t, c, "/close")
	eventually(t, 5*time.Second, "the three connections closed", func() bool { return s.open.Load() == 0 })
}

func TestTransportRequestEndClosesTheConnection(t *testing.T) {
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
	c := s.transport(t, time.Minute)

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
}

func TestTransportPassesInformationalAnswersOn(t *testing.T) {
	s := newAPIServer(t, func(w http.ResponseWriter, r *http.Request) {
		for range 3 {
			w.Header().Set("Link", "</style.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
		}
		io.WriteString(w, "answer")
	})
	c := s.transport(t, time.Minute)
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

// TestTransportDropsAnAnswerNoOneAskedFor: bytes the API server sent after
// an answer, in the same write as its end, wait inside crypto/tls: the
// connection is not used again, or the next request, perhaps another
// person's, gets them as its answer (91ac4e5 fixed the hub's own client
// for this). The transport's read loop reads them on the idle connection
// and closes it.
//
// The second request waits for that close. Sent at once, it got the stray
// answer in 2 runs of 20: the transport gives the connection back to its
// pool before its read loop looks at it again, and a request that takes it
// in between gets what is already read ahead (issue 34).
func TestTransportDropsAnAnswerNoOneAskedFor(t *testing.T) {
	closed := make(chan struct{}) // the transport closed /first's connection
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
		defer close(closed)
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
	c := s.transport(t, time.Minute)
	if _, body := s.get(t, c, "/first"); body != "first" {
		t.Fatalf("first answer %q", body)
	}
	<-closed
	if _, body := s.get(t, c, "/second"); body != "fresh" {
		t.Errorf("the second request got %q, an answer sent for no request; want %q", body, "fresh")
	}
}
