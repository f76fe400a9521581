package agent

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/tunnel"
)

// sessions returns a hub's and an agent's ends of a tunnel over loopback.
func sessions(t *testing.T) (hub, agent *tunnel.Session) {
	t.Helper()
	accepted := make(chan *tunnel.Session, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, err := tunnel.Accept(w, r, tunnel.DefaultConfig())
		if err != nil {
			t.Error(err)
			return
		}
		accepted <- s
	}))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a, _, err := tunnel.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), tunnel.DialOptions{}, tunnel.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	h := <-accepted
	t.Cleanup(func() { a.Close(); h.Close() })
	return h, a
}

// apiServer listens on loopback and hands over each connection it accepts.
func apiServer(t *testing.T) (addr string, conns <-chan net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	c := make(chan net.Conn, 256)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				close(c)
				return
			}
			c <- conn
		}
	}()
	return ln.Addr().String(), c
}

// TestSpliceHoldsNoBufferWhileIdle: streams the agent relays to an API
// server that says nothing, as watches between events, cost the agent no
// copy buffer each (it held 256 KiB per stream), and still relay both ways,
// half-closes included.
func TestSpliceHoldsNoBufferWhileIdle(t *testing.T) {
	const streams = 100
	hub, agent := sessions(t)
	addr, conns := apiServer(t)
	spliced := make(chan struct{}, streams)
	go func() {
		for {
			st, err := agent.Accept(context.Background())
			if err != nil {
				return
			}
			api, err := net.Dial("tcp", addr)
			if err != nil {
				st.Close()
				continue
			}
			go func() {
				Splice(st, api)
				spliced <- struct{}{}
			}()
		}
	}()
	heap := func() int64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	before := heap()
	hubs := make([]net.Conn, streams)
	apis := make([]net.Conn, streams)
	for i := range hubs {
		st, err := hub.Open(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		st.Write([]byte("GET")) // the agent learns of the stream
		hubs[i] = st
		apis[i] = <-conns
		got := make([]byte, 3)
		if _, err := io.ReadFull(apis[i], got); err != nil || string(got) != "GET" {
			t.Fatalf("the API server read %q, %v; want the hub's bytes", got, err)
		}
		// A first byte back: the relay has read its API server once, and
		// waits for the next.
		apis[i].Write([]byte("!"))
		if _, err := io.ReadFull(st, got[:1]); err != nil {
			t.Fatal(err)
		}
	}
	if grown := heap() - before; grown/streams > 16<<10 {
		t.Errorf("%d idle relays grew the agent's heap by %d KiB, %d KiB each; want no copy buffer each (256 KiB)", streams, grown>>10, grown/streams>>10)
	}
	// The API server answers and closes its side; the hub reads it all,
	// then closes its own.
	for i, api := range apis {
		api.Write([]byte("answer"))
		api.(*net.TCPConn).CloseWrite()
		got, err := io.ReadAll(hubs[i])
		if err != nil || string(got) != "answer" {
			t.Fatalf("the hub read %q, %v; want the API server's answer, then EOF", got, err)
		}
		hubs[i].(interface{ CloseWrite() error }).CloseWrite()
		if rest, err := io.ReadAll(api); err != nil || len(rest) != 0 {
			t.Fatalf("the API server read %q, %v after the hub's half-close; want EOF", rest, err)
		}
		api.Close()
		hubs[i].Close()
	}
	for range streams {
		<-spliced
	}
}

// TestAgentBoundsTheHubsStreams: an agent with the default tunnel settings,
// or with another tunnel field set, lets the hub have no more than
// maxHubStreams streams open at once; the tunnel's MaxPeerStreams resets
// the rest (TestPeerStreamsAreBounded).
func TestAgentBoundsTheHubsStreams(t *testing.T) {
	u, _ := url.Parse("https://hub.example.com")
	for _, tc := range []tunnel.Config{{}, {WriteTimeout: time.Second}} {
		a, err := New(Config{Options: Options{HubURL: u, Name: "c", Token: "t"}, Tunnel: tc})
		if err != nil {
			t.Fatal(err)
		}
		if got := a.cfg.Tunnel.MaxPeerStreams; got != maxHubStreams {
			t.Fatalf("given %+v, the agent lets the hub open %d streams at once (0: no bound), want %d", tc, got, maxHubStreams)
		}
		if tc.WriteTimeout != 0 && a.cfg.Tunnel.WriteTimeout != tc.WriteTimeout {
			t.Errorf("given %+v, the agent's WriteTimeout is %v", tc, a.cfg.Tunnel.WriteTimeout)
		}
	}
	_, err := New(Config{Options: Options{HubURL: u, Name: "c", Token: "t"}, Tunnel: tunnel.Config{MaxPeerStreams: -1}})
	if err == nil || !strings.Contains(err.Error(), "MaxPeerStreams") {
		t.Errorf("an agent with MaxPeerStreams -1: %v, want an error naming MaxPeerStreams", err)
	}
}

// TestSpliceDeliversWhatCameBeforeAReset: what the hub sends just before it
// resets a stream (its TLS alert to an API server whose certificate it
// refused) still reaches the API server, whole, and then the relay ends
// both ways. The API server reads nothing until the relay has taken the
// reset in, and its socket holds far less than the hub sent, so the bytes
// can arrive only if the relay goes on writing them after the reset.
// (The copy towards the API server ends when what came before the reset is
// written; the copy back ends at the reset, and used to close the API
// server's socket under the other: TestLyingAgentGetsNoRequestThrough saw
// the impostor get EOF, not the hub's alert.)
func TestSpliceDeliversWhatCameBeforeAReset(t *testing.T) {
	for _, tc := range []struct {
		name   string
		finish bool // the hub half-closes its side before the reset
	}{
		{"reset", false},
		{"half-close, then reset", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hub, agent := sessions(t)
			addr, conns := apiServer(t)
			spliced := make(chan struct{})
			go func() {
				defer close(spliced)
				st, err := agent.Accept(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				api, err := net.Dial("tcp", addr)
				if err != nil {
					st.Close()
					t.Error(err)
					return
				}
				api.(*net.TCPConn).SetWriteBuffer(4 << 10)
				Splice(st, api)
			}()
			st, err := hub.Open(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			// Within the stream's window (1 MiB): all of it is sent before
			// the reset, whether the agent writes any of it on or not.
			// The API server's socket, sending 4 KiB and receiving 128 KiB
			// or so until it reads, holds far less.
			payload := make([]byte, 768<<10)
			rand.Read(payload)
			if _, err := st.Write(payload); err != nil {
				t.Fatal(err)
			}
			api := <-conns
			defer api.Close()
			if tc.finish {
				st.(interface{ CloseWrite() error }).CloseWrite()
			}
			waitForCopiers(t, "the splice to copy both ways", func(n int) bool { return n == 2 })
			if err := st.(interface{ Reset() error }).Reset(); err != nil {
				t.Fatal(err)
			}
			// The copy back to the hub ends at the reset. The other one
			// may only end by writing the rest, once the API server reads.
			waitForCopiers(t, "the copy back to the hub to end", func(n int) bool { return n <= 1 })
			got, err := io.ReadAll(api)
			if err != nil || !bytes.Equal(got, payload) {
				t.Fatalf("the API server read %d bytes (%v), want the %d the hub sent before its reset", len(got), err, len(payload))
			}
			<-spliced // and the relay ended: the API server's read saw EOF
		})
	}
}

// waitForCopiers waits until the number of goroutines copying one
// direction of a splice meets want.
func waitForCopiers(t *testing.T, what string, want func(int) bool) {
	t.Helper()
	buf := make([]byte, 1<<20)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		stacks := buf[:runtime.Stack(buf, true)]
		if want(bytes.Count(stacks, []byte("agent.copier.run("))) {
			return
		}
	}
	t.Fatalf("still waiting after 5 s: %s", what)
}
