package tunnel

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tetherhq/tether/internal/gather"
	"github.com/tetherhq/tether/internal/pki"
	"github.com/tetherhq/tether/internal/testutil/faultproxy"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// pair connects a client session to a server session through an HTTP
// server, plain or TLS.
func pair(t testing.TB, useTLS bool) (client, server *Session) {
	t.Helper()
	return pairWith(t, useTLS, DefaultConfig())
}

// pairWith is pair with both sessions tuned by cfg.
func pairWith(t testing.TB, useTLS bool, cfg Config) (client, server *Session) {
	t.Helper()
	return pairVia(t, useTLS, cfg, nil)
}

// pairVia is pairWith with the client dialing the address via returns for
// the server's, when via is set: a proxy's.
func pairVia(t testing.TB, useTLS bool, cfg Config, via func(addr string) string) (client, server *Session) {
	t.Helper()
	accepted := make(chan *Session, 1)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, err := Accept(w, r, cfg)
		if err != nil {
			t.Error(err)
			return
		}
		accepted <- s
	})
	var srv *httptest.Server
	if useTLS {
		srv = httptest.NewTLSServer(handler)
	} else {
		srv = httptest.NewServer(handler)
	}
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	url := "ws" + strings.TrimPrefix(srv.URL, "http")
	if via != nil {
		addr := srv.Listener.Addr().String()
		url = strings.Replace(url, addr, via(addr), 1)
	}
	var tlsConfig *tls.Config
	if useTLS {
		tlsConfig = srv.Client().Transport.(*http.Transport).TLSClientConfig
	}
	c, _, err := Dial(ctx, url, DialOptions{TLSConfig: tlsConfig}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := <-accepted
	t.Cleanup(func() { c.Close(); s.Close() })
	return c, s
}

func TestStreamsBothWays(t *testing.T) {
	for _, useTLS := range []bool{false, true} {
		name := map[bool]string{false: "ws", true: "wss"}[useTLS]
		t.Run(name, func(t *testing.T) {
			c, s := pair(t, useTLS)
			ctx := context.Background()
			for _, dir := range []struct {
				name         string
				opener, peer *Session
			}{{"client opens", c, s}, {"server opens", s, c}} {
				st, err := dir.opener.Open(ctx)
				if err != nil {
					t.Fatal(err)
				}
				payload := strings.Repeat("x", 1<<20)
				go func() {
					io.WriteString(st, payload)
					st.Close()
				}()
				in, err := dir.peer.Accept(ctx)
				if err != nil {
					t.Fatal(err)
				}
				got, err := io.ReadAll(in)
				if err != nil || len(got) != len(payload) {
					t.Fatalf("%s: read %d bytes, %v", dir.name, len(got), err)
				}
				in.Close()
			}
		})
	}
}

func TestCloseEndsEverything(t *testing.T) {
	c, s := pair(t, false)
	ctx := context.Background()
	acceptErr := make(chan error, 1)
	go func() {
		_, err := s.Accept(ctx)
		acceptErr <- err
	}()
	st, err := c.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-acceptErr; err != nil { // the first Accept takes the stream
		t.Fatal(err)
	}
	go func() {
		_, err := s.Accept(ctx)
		acceptErr <- err
	}()
	if err := c.CloseWithReason(4000, "test"); err != nil {
		t.Fatal(err)
	}
	c.Close() // twice is fine
	select {
	case err := <-acceptErr:
		if !errors.Is(err, ErrClosed) {
			t.Errorf("Accept after the peer closed = %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Accept still blocked after the peer closed")
	}
	<-s.Done()
	if _, err := st.Write([]byte("x")); err == nil {
		t.Error("a write on a closed session's stream succeeded")
	}
	if _, err := c.Open(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Open after Close = %v, want ErrClosed", err)
	}
}

// countingConn counts the writes that reach the socket.
type countingConn struct {
	net.Conn
	writes atomic.Int32
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// TestBatchConnGathersAFrame: under TLS, a 256 KiB frame's records (23 on
// a new connection, whose first records crypto/tls keeps small) reach the
// socket in one write, and what the peer reads is the frame.
func TestBatchConnGathersAFrame(t *testing.T) {
	ca, err := pki.NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.IssueTLS(pki.Leaf{CommonName: "hub", Hosts: []string{"hub.test"}})
	if err != nil {
		t.Fatal(err)
	}
	ours, theirs := net.Pipe()
	defer ours.Close()
	defer theirs.Close()
	socket := &countingConn{Conn: ours}
	batch := &gather.Conn{Conn: socket}
	client := tls.Client(batch, &tls.Config{RootCAs: ca.Pool(), ServerName: "hub.test"})
	server := tls.Server(theirs, &tls.Config{Certificates: []tls.Certificate{cert}})
	frame := bytes.Repeat([]byte("tether"), maxFrame/6)
	got := make(chan []byte, 1)
	go func() {
		b := make([]byte, len(frame))
		n, _ := io.ReadFull(server, b)
		got <- b[:n]
	}()
	if err := client.Handshake(); err != nil {
		t.Fatal(err)
	}
	c := newWSConn(client, batch, 1<<10, true, DefaultConfig())
	c.batch = batch
	before := socket.writes.Load()
	if err := c.send(frame); err != nil {
		t.Fatal(err)
	}
	if n := socket.writes.Load() - before; n != 1 {
		t.Errorf("a %d-byte frame took %d writes to the socket, want 1", len(frame), n)
	}
	if b := <-got; !bytes.Equal(b, frame) {
		t.Errorf("the peer read %d bytes, not the frame", len(b))
	}
}

// TestWriteTimeoutEndsTheSession: a peer that reads for a while and then
// stops reading altogether ends the session once a write has waited
// WriteTimeout, and the stream's writer gets an error instead of waiting
// for good.
func TestWriteTimeoutEndsTheSession(t *testing.T) {
	cfg := DefaultConfig()
	cfg.WriteTimeout = 300 * time.Millisecond
	ours, peer := net.Pipe()
	defer peer.Close()
	s := newSession(newWSConn(ours, ours, 1<<10, true, cfg), cfg, true)
	defer s.Close()
	stopped := make(chan struct{})
	go func() {
		// Read the first 64 KiB, then nothing more.
		io.CopyN(io.Discard, peer, 64<<10)
		close(stopped)
	}()
	st, err := s.Open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	wrote := make(chan error, 1)
	go func() {
		_, err := st.Write(make([]byte, 200<<10))
		wrote <- err
	}()
	<-stopped
	select {
	case err := <-wrote:
		if err == nil {
			t.Fatal("the write returned no error though the peer stopped reading")
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("the write failed with %v, want the write timeout", err)
		}
	case <-time.After(20 * cfg.WriteTimeout):
		t.Fatal("the write still waits, long after WriteTimeout")
	}
	select {
	case <-s.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the session did not end")
	}
}

// TestCloseOverAStalledTLSConnection: an agent's Close over TLS returns at
// once when the hub has stopped reading, as over a plain connection. The
// frame being written waits in gather's Release, where crypto/tls doesn't
// see a write in progress: its Close sent a close_notify first, which
// waited behind that frame for its own 5 s deadline.
func TestCloseOverAStalledTLSConnection(t *testing.T) {
	var px *faultproxy.Proxy
	c, s := pairVia(t, true, DefaultConfig(), func(addr string) string {
		p, err := faultproxy.New(addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		px = p
		return p.Addr()
	})
	// More windows than the sockets and the proxy hold, so the connection
	// fills up before the windows run out.
	var sts []*stream
	for range 64 {
		st := open(t, c)
		st.Write([]byte("x"))
		accept(t, s)
		sts = append(sts, st.(*stream))
	}
	px.SetFaults(faultproxy.Up, faultproxy.Faults{Blackhole: true})
	for _, st := range sts {
		go st.Write(make([]byte, 2<<20)) // returns once the session ends
	}
	// The connection is stalled: one frame's write waits on the socket,
	// and every other Write waits behind it, or for window.
	waitFor(t, "the writes to stall", func() bool {
		return parked("IO wait", inStreamWrite) == 1 && parked("select", inStreamWrite) == len(sts)-1
	})
	// crypto/tls's Close sends a close_notify alert, with 5 s to go out:
	// sent behind the stuck frame, it takes all of them. So Close must
	// return without ever waiting to send one; how long it takes is not
	// the test, what it waits on is.
	closed := make(chan struct{})
	go func() { c.Close(); close(closed) }()
	waitFor(t, "Close to return", func() bool {
		select {
		case <-closed:
			return true
		default:
		}
		if parked("", inSessionClose, inCloseNotify) > 0 {
			t.Fatal("Close over a stalled TLS connection waits to send its close_notify alert")
		}
		return false
	})
}
