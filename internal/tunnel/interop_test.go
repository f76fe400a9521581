package tunnel

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/hashicorp/yamux"
)

// yamuxConn gives hashicorp/yamux the net.Conn it wants over a gorilla
// WebSocket, as Tether's tunnel did before it had its own multiplexer and
// framing: each Write one binary message, and Read the peer's messages as
// one byte stream. gorilla splits messages into frames of its buffer's
// size, so continuation frames are exercised too.
type yamuxConn struct {
	ws *websocket.Conn
	r  io.Reader // the message being read; nil between messages
}

func (c *yamuxConn) Read(p []byte) (int, error) {
	for {
		if c.r == nil {
			typ, r, err := c.ws.NextReader()
			if err != nil {
				return 0, err
			}
			if typ != websocket.BinaryMessage {
				return 0, errNotBinary
			}
			c.r = r
		}
		n, err := c.r.Read(p)
		if err == io.EOF {
			c.r = nil
			if n == 0 {
				continue
			}
			err = nil
		}
		return n, err
	}
}

func (c *yamuxConn) Write(p []byte) (int, error) {
	if err := c.ws.WriteMessage(websocket.BinaryMessage, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (c *yamuxConn) Close() error { return c.ws.Close() }

// yamuxPeer connects a Session to a hashicorp/yamux session over a
// WebSocket: ours dials when oursIsClient, else yamux does.
func yamuxPeer(t *testing.T, oursIsClient bool) (*Session, *yamux.Session) {
	t.Helper()
	ycfg := yamux.DefaultConfig()
	ycfg.EnableKeepAlive = false
	ycfg.LogOutput = io.Discard
	ycfg.MaxStreamWindowSize = 1 << 20
	type result struct {
		s *Session
		y *yamux.Session
	}
	done := make(chan result, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !oursIsClient {
			s, err := Accept(w, r, DefaultConfig())
			if err != nil {
				t.Error(err)
			}
			done <- result{s: s}
			return
		}
		ws, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
		if err != nil {
			t.Error(err)
			return
		}
		y, err := yamux.Server(&yamuxConn{ws: ws}, ycfg)
		if err != nil {
			t.Error(err)
		}
		done <- result{y: y}
	}))
	t.Cleanup(srv.Close)
	url := "ws" + strings.TrimPrefix(srv.URL, "http")
	var ours *Session
	var theirs *yamux.Session
	if oursIsClient {
		s, _, err := Dial(context.Background(), url, DialOptions{}, DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		ours, theirs = s, (<-done).y
	} else {
		ws, _, err := websocket.DefaultDialer.Dial(url, nil)
		if err != nil {
			t.Fatal(err)
		}
		y, err := yamux.Client(&yamuxConn{ws: ws}, ycfg)
		if err != nil {
			t.Fatal(err)
		}
		ours, theirs = (<-done).s, y
	}
	t.Cleanup(func() { ours.Close(); theirs.Close() })
	return ours, theirs
}

// TestYamuxInterop: the wire format is yamux's, so an agent or hub still on
// hashicorp/yamux works with one on Tether's multiplexer, either way round:
// streams opened by either side, 8 MiB each way (past the windows), and
// half-close, which is yamux's Close.
func TestYamuxInterop(t *testing.T) {
	payload := make([]byte, 8<<20)
	rand.Read(payload)
	for _, oursIsClient := range []bool{true, false} {
		name := map[bool]string{true: "ours dials", false: "yamux dials"}[oursIsClient]
		t.Run(name, func(t *testing.T) {
			ours, theirs := yamuxPeer(t, oursIsClient)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()

			// Ours opens; yamux echoes.
			go func() {
				st, err := theirs.AcceptStream()
				if err != nil {
					return
				}
				io.Copy(st, st)
				st.Close()
			}()
			st, err := ours.Open(ctx)
			if err != nil {
				t.Fatal(err)
			}
			echo(t, st, payload)

			// yamux opens; ours echoes.
			ours.Handle(func(st net.Conn) {
				defer st.Close()
				io.Copy(st, st)
			})
			yst, err := theirs.OpenStream()
			if err != nil {
				t.Fatal(err)
			}
			echo(t, yst, payload)
			noStreamsYamux(t, ours, theirs)
		})
	}
}

// echo sends payload on st, half-closes, and checks that it all comes back.
func echo(t *testing.T, st net.Conn, payload []byte) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		_, err := st.Write(payload)
		if cw, ok := st.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		} else {
			st.Close() // yamux: a half-close
		}
		errc <- err
	}()
	got, err := io.ReadAll(st)
	if werr := <-errc; werr != nil {
		t.Fatalf("write: %v", werr)
	}
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("echo: %d bytes back of %d, %v", len(got), len(payload), err)
	}
	st.Close()
}

func noStreamsYamux(t *testing.T, ours *Session, theirs *yamux.Session) {
	t.Helper()
	waitFor(t, "both sides to forget their streams", func() bool { return ours.NumStreams() == 0 && theirs.NumStreams() == 0 })
}
