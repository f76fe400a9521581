package tunnel

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tetherhq/tether/internal/testutil/connectproxy"
)

// pipeConn is one end of a WebSocket whose peer is played byte by byte.
func pipeConn(t *testing.T, client bool) (*wsConn, net.Conn) {
	t.Helper()
	ours, peer := net.Pipe()
	c := newWSConn(ours, ours, 1<<10, client, DefaultConfig())
	t.Cleanup(func() { ours.Close(); peer.Close() })
	return c, peer
}

// wsFrame builds a frame as a peer would: masked with key when it is not
// nil.
func wsFrame(b0 byte, payload []byte, key []byte) []byte {
	out := []byte{b0}
	n := len(payload)
	m := byte(0)
	if key != nil {
		m = 0x80
	}
	switch {
	case n < 126:
		out = append(out, m|byte(n))
	case n <= 0xffff:
		out = append(out, m|126, byte(n>>8), byte(n))
	default:
		out = append(out, m|127, 0, 0, 0, 0, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	if key == nil {
		return append(out, payload...)
	}
	out = append(out, key...)
	for i, c := range payload {
		out = append(out, c^key[i&3])
	}
	return out
}

// TestWebSocketReadErrors: frames RFC 6455 forbids, or the tunnel does not
// carry, end the reading with an error that says what was wrong.
func TestWebSocketReadErrors(t *testing.T) {
	key := []byte{1, 2, 3, 4}
	for _, tc := range []struct {
		name   string
		client bool // our end is the client
		input  []byte
		want   string
	}{
		{"unmasked from a client", false, wsFrame(0x82, []byte("x"), nil), "unmasked WebSocket frame"},
		{"masked from a server", true, wsFrame(0x82, []byte("x"), key), "masked WebSocket frame from the server"},
		{"reserved bits", false, wsFrame(0xc2, []byte("x"), key), "reserved bits"},
		{"unknown opcode", false, wsFrame(0x83, []byte("x"), key), "opcode 0x3"},
		{"text", false, wsFrame(0x81, []byte("x"), key), "text message"},
		{"continuation first", false, wsFrame(0x80, []byte("x"), key), "continuation frame out of place"},
		{"a message inside a message", false, append(wsFrame(0x02, []byte("x"), key), wsFrame(0x82, []byte("y"), key)...), "continuation frame out of place"},
		{"fragmented ping", false, wsFrame(0x09, []byte("x"), key), "control frame fragmented"},
		{"long ping", false, wsFrame(0x89, make([]byte, 126), key), "control frame fragmented or longer"},
		{"huge length", false, []byte{0x82, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4}, "length out of range"},
		{"close with a code", false, wsFrame(0x88, []byte{0x0f, 0xa0, 'b', 'y', 'e'}, key), `closed the WebSocket: 4000 "bye"`},
		{"cut in the header", false, []byte{0x82, 0xfe, 0x01}, "unexpected EOF"},
		{"cut in the body", false, wsFrame(0x82, []byte("hello"), key)[:8], "unexpected EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, peer := pipeConn(t, tc.client)
			go func() {
				peer.Write(tc.input)
				peer.Close()
			}()
			_, err := io.ReadAll(c)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("read error %v, want one saying %q", err, tc.want)
			}
		})
	}
}

// TestWebSocketControlFrames: a ping between the fragments of a message is
// answered with a pong carrying its payload, a pong is ignored, and a
// normal close ends the byte stream like EOF.
func TestWebSocketControlFrames(t *testing.T) {
	key := []byte{9, 8, 7, 6}
	c, peer := pipeConn(t, false)
	var in []byte
	in = append(in, wsFrame(0x02, []byte("hel"), key)...)
	in = append(in, wsFrame(0x89, []byte("are you there"), key)...)
	in = append(in, wsFrame(0x8a, []byte("stray pong"), key)...)
	in = append(in, wsFrame(0x80, []byte("lo, "), key)...)
	in = append(in, wsFrame(0x82, nil, key)...)
	in = append(in, wsFrame(0x82, []byte("world"), key)...)
	in = append(in, wsFrame(0x88, []byte{0x03, 0xe8}, key)...)
	go peer.Write(in)
	pong := make(chan []byte, 1)
	go func() {
		b := make([]byte, 64)
		n, _ := io.ReadAtLeast(peer, b, 2+len("are you there"))
		pong <- b[:n]
	}()
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "hello, world" {
		t.Fatalf("read %q, %v; want %q and EOF", got, err, "hello, world")
	}
	if want := wsFrame(0x8a, []byte("are you there"), nil); !bytes.Equal(<-pong, want) {
		t.Errorf("the ping's answer is not an unmasked pong with its payload")
	}
}

// TestWebSocketFramesAreWellFormed: what each end writes, gorilla reads:
// masked from the client, unmasked from the server, at every length form.
func TestWebSocketFramesAreWellFormed(t *testing.T) {
	for _, client := range []bool{true, false} {
		for _, n := range []int{0, 5, 125, 126, 20000, 70000, maxFrame} {
			t.Run(fmt.Sprintf("client=%v/%d", client, n), func(t *testing.T) {
				hdr := []byte("0123456789ab")
				body := bytes.Repeat([]byte{0xa5}, n)
				want := append(hdr, body...)
				write := func(c *wsConn) error {
					defer c.Close()
					return c.WriteFrame(hdr, body, time.Now().Add(5*time.Second))
				}
				read := func(ws *websocket.Conn) error {
					defer ws.Close()
					typ, got, err := ws.ReadMessage()
					if err == nil && (typ != websocket.BinaryMessage || !bytes.Equal(got, want)) {
						err = fmt.Errorf("gorilla read a %d-byte message of type %d, want the %d-byte frame", len(got), typ, len(want))
					}
					return err
				}
				errc := make(chan error, 1)
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if client {
						ws, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
						if err == nil {
							err = read(ws)
						}
						errc <- err
						return
					}
					conn, err := upgrade(w, r)
					if err == nil {
						err = write(newWSConn(conn, conn, 1<<10, false, DefaultConfig()))
					}
					errc <- err
				}))
				defer srv.Close()
				url := "ws" + strings.TrimPrefix(srv.URL, "http")
				var err error
				if client {
					up, _, derr := dialWebSocket(context.Background(), url, DialOptions{})
					if derr != nil {
						t.Fatal(derr)
					}
					err = write(up.wsConn(1<<10, DefaultConfig()))
				} else {
					ws, _, derr := websocket.DefaultDialer.Dial(url, nil)
					if derr != nil {
						t.Fatal(derr)
					}
					err = read(ws)
				}
				if err != nil {
					t.Fatal(err)
				}
				if err := <-errc; err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// TestWebSocketCloseReason: CloseWithReason's close frame reaches a
// gorilla peer with its code and reason.
func TestWebSocketCloseReason(t *testing.T) {
	got := make(chan error, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
		if err != nil {
			got <- err
			return
		}
		defer ws.Close()
		_, _, err = ws.ReadMessage()
		got <- err
	}))
	defer srv.Close()
	s, _, err := Dial(context.Background(), "ws"+strings.TrimPrefix(srv.URL, "http"), DialOptions{}, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	s.CloseWithReason(4001, "replaced by a newer connection")
	var ce *websocket.CloseError
	if err := <-got; !errors.As(err, &ce) || ce.Code != 4001 || ce.Text != "replaced by a newer connection" {
		t.Errorf("the peer read %v, want close 4001 with the reason", err)
	}
}

// TestDialRefusesBadAnswers: Dial accepts only a 101 that upgrades to a
// WebSocket and answers its key, and returns any other answer with the
// error.
func TestDialRefusesBadAnswers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer func(w http.ResponseWriter, r *http.Request)
		status int
		want   string
	}{
		{"unauthorized", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "no", http.StatusUnauthorized)
		}, http.StatusUnauthorized, "401"},
		{"redirect", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		}, http.StatusFound, "302"},
		{"wrong accept", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Upgrade", "websocket")
			w.Header().Set("Connection", "Upgrade")
			w.Header().Set("Sec-WebSocket-Accept", acceptKey("another key"))
			w.WriteHeader(http.StatusSwitchingProtocols)
		}, http.StatusSwitchingProtocols, "does not match the key"},
		{"no upgrade", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Connection", "Upgrade")
			w.Header().Set("Sec-WebSocket-Accept", acceptKey(r.Header.Get("Sec-WebSocket-Key")))
			w.WriteHeader(http.StatusSwitchingProtocols)
		}, http.StatusSwitchingProtocols, "does not upgrade to a WebSocket"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewUnstartedServer(http.HandlerFunc(tc.answer))
			closed := make(chan struct{}, 1)
			srv.Config.ConnState = func(_ net.Conn, state http.ConnState) {
				if state == http.StateClosed {
					closed <- struct{}{}
				}
			}
			srv.Start()
			defer srv.Close()
			s, resp, err := Dial(context.Background(), "ws"+strings.TrimPrefix(srv.URL, "http"), DialOptions{}, DefaultConfig())
			if err == nil {
				s.Close()
				t.Fatal("Dial succeeded")
			}
			if !errors.Is(err, ErrBadHandshake) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Dial error %v, want ErrBadHandshake saying %q", err, tc.want)
			}
			if resp == nil || resp.StatusCode != tc.status {
				t.Errorf("Dial returned response %v, want status %d", resp, tc.status)
			}
			// The refused connection is closed, not kept idle by a
			// transport nobody will use again: an agent paced with 503s
			// would otherwise collect them.
			select {
			case <-closed:
			case <-time.After(5 * time.Second):
				t.Error("the connection of a refused dial is still open")
			}
		})
	}
}

// TestAcceptRefusesNonUpgrades: a request that is no WebSocket upgrade is
// answered with an error status, and Accept says why.
func TestAcceptRefusesNonUpgrades(t *testing.T) {
	errs := make(chan error, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, err := Accept(w, r, DefaultConfig())
		if err == nil {
			s.Close()
		}
		errs <- err
	}))
	defer srv.Close()
	for _, tc := range []struct {
		name   string
		header http.Header
		status int
	}{
		{"plain GET", http.Header{}, http.StatusUpgradeRequired},
		{"old version", http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}, "Sec-Websocket-Version": {"8"}, "Sec-Websocket-Key": {"dGhlIHNhbXBsZSBub25jZQ=="}}, http.StatusUpgradeRequired},
		{"short key", http.Header{"Connection": {"keep-alive, Upgrade"}, "Upgrade": {"websocket"}, "Sec-Websocket-Version": {"13"}, "Sec-Websocket-Key": {"c2hvcnQ="}}, http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
			req.Header = tc.header
			resp, err := http.DefaultTransport.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Errorf("status %d, want %d", resp.StatusCode, tc.status)
			}
			if err := <-errs; !errors.Is(err, ErrBadHandshake) {
				t.Errorf("Accept error %v, want ErrBadHandshake", err)
			}
		})
	}
}

// TestDialOutlivesItsContext: the context bounds the dial and the
// handshake, not the session.
func TestDialOutlivesItsContext(t *testing.T) {
	accepted := make(chan *Session, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, err := Accept(w, r, DefaultConfig())
		if err != nil {
			t.Error(err)
			return
		}
		accepted <- s
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	c, _, err := Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), DialOptions{}, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	s := <-accepted
	defer s.Close()
	defer c.Close()
	// Whatever the context's end set off in net/http (a goroutine that
	// watches the request, a function run after the context) has run
	// before the session is used.
	waitFor(t, "net/http to finish with the dial's context", func() bool {
		return parked("", "context.(*afterFuncCtx)") == 0 && parked("", "net/http.(*persistConn)") == 0
	})
	st := open(t, c)
	io.WriteString(st, "still here")
	st.Close()
	got, err := io.ReadAll(accept(t, s))
	if err != nil || string(got) != "still here" {
		t.Fatalf("read %q, %v after the dial's context ended", got, err)
	}
}

// fuzzConn is a connection whose peer sent data and hung up; what is
// written to it is dropped.
type fuzzConn struct {
	net.Conn // nil: only the methods below are called
	r        io.Reader
}

func (c fuzzConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c fuzzConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c fuzzConn) Close() error                     { return nil }
func (c fuzzConn) SetWriteDeadline(time.Time) error { return nil }

// FuzzWebSocket reads arbitrary bytes as the tunnel's WebSocket, as either
// end, and must not panic or read past a frame; and whatever the data,
// written as frames by one end and read by the other, it must come back
// whole.
func FuzzWebSocket(f *testing.F) {
	key := []byte{1, 2, 3, 4}
	f.Add(wsFrame(0x82, []byte("hello"), key), uint16(3))
	f.Add(append(wsFrame(0x02, []byte("a"), key), wsFrame(0x80, []byte("b"), key)...), uint16(1))
	f.Add(wsFrame(0x89, []byte("ping"), key), uint16(0))
	f.Add(wsFrame(0x82, make([]byte, 300), nil), uint16(200))
	f.Add(wsFrame(0x88, []byte{0x03, 0xe9}, nil), uint16(7))
	f.Fuzz(func(t *testing.T, data []byte, split uint16) {
		for _, client := range []bool{false, true} {
			c := newWSConn(fuzzConn{r: bytes.NewReader(data)}, fuzzConn{}, 64, client, DefaultConfig())
			n, _ := io.Copy(io.Discard, c)
			if n > int64(len(data)) {
				t.Fatalf("read %d bytes from %d of input", n, len(data))
			}
		}
		cut := min(int(split), len(data))
		for _, client := range []bool{false, true} {
			var wire bytes.Buffer
			w := newWSConn(struct {
				io.Reader
				io.Writer
				io.Closer
			}{nil, &wire, nil}, fuzzConn{}, 64, client, DefaultConfig())
			if err := w.WriteFrame(data[:cut], data[cut:], time.Time{}); err != nil {
				t.Fatal(err)
			}
			r := newWSConn(fuzzConn{r: &wire}, fuzzConn{}, 64, !client, DefaultConfig())
			got, err := io.ReadAll(r)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("client=%v: read back %d bytes (%v), wrote %d", client, len(got), err, len(data))
			}
		}
	})
}

// TestDialThroughAProxy: ws:// and wss:// both go through an HTTP proxy's
// CONNECT, and the session works across it.
func TestDialThroughAProxy(t *testing.T) {
	for _, useTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "ws", true: "wss"}[useTLS], func(t *testing.T) {
			accepted := make(chan *Session, 1)
			handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				s, err := Accept(w, r, DefaultConfig())
				if err != nil {
					t.Error(err)
					return
				}
				accepted <- s
			})
			srv := httptest.NewUnstartedServer(handler)
			opts := DialOptions{}
			if useTLS {
				srv.StartTLS()
				opts.TLSConfig = srv.Client().Transport.(*http.Transport).TLSClientConfig
			} else {
				srv.Start()
			}
			defer srv.Close()
			proxy := connectproxy.Start(t)
			opts.Proxy = http.ProxyURL(proxy.URL)
			c, _, err := Dial(context.Background(), "ws"+strings.TrimPrefix(srv.URL, "http"), opts, DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			s := <-accepted
			defer s.Close()
			if n := proxy.Tunnelled(); n != 1 {
				t.Fatalf("the proxy carried %d connections, want 1", n)
			}
			st := open(t, c)
			io.WriteString(st, "through the proxy")
			st.Close()
			got, err := io.ReadAll(accept(t, s))
			if err != nil || string(got) != "through the proxy" {
				t.Fatalf("read %q, %v", got, err)
			}
		})
	}
}

// TestIdleServerHoldsNoReadBuffer: a hub's connection borrows its read
// buffer while bytes wait in it, and holds none once they are read, while
// it waits for the next frame.
func TestIdleServerHoldsNoReadBuffer(t *testing.T) {
	c, peer := pipeConn(t, false)
	key := []byte{1, 2, 3, 4}
	go peer.Write(append(wsFrame(0x82, []byte("one"), key), wsFrame(0x82, []byte("two"), key)...))
	lr := c.br.(*lazyReader)
	got := make([]byte, 3)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "one" {
		t.Fatalf("read %q, %v", got, err)
	}
	if lr.buf == nil {
		t.Fatal("the second frame's bytes were not buffered with the first's")
	}
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "two" {
		t.Fatalf("read %q, %v", got, err)
	}
	if lr.buf != nil {
		t.Fatal("the connection kept its read buffer once everything in it was read")
	}
	done := make(chan error, 1)
	go func() {
		_, err := io.ReadFull(c, got)
		done <- err
	}()
	// The read waits for a frame, holding no buffer while it does.
	waitParked(t, 1, "select", inWaitFrame)
	if lr.buf != nil {
		t.Fatal("the connection holds a read buffer while it waits for a frame")
	}
	peer.Write(wsFrame(0x82, []byte("three"), key))
	if err := <-done; err != nil || string(got) != "thr" {
		t.Fatalf("read %q, %v", got, err)
	}
}

// tcpConn is pipeConn over a loopback TCP connection.
func tcpConn(t *testing.T) (*wsConn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	ours, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	c := newWSConn(ours, ours, 1<<10, false, DefaultConfig())
	t.Cleanup(func() { ours.Close(); peer.Close() })
	return c, peer
}

// TestServerReadsFramesOverTCP: frames of every length class, sent whole,
// several in one write, and cut at every few bytes, come out as sent, and
// the reader holds no buffer once each is read.
func TestServerReadsFramesOverTCP(t *testing.T) {
	c, peer := tcpConn(t)
	lr := c.br.(*lazyReader)
	key := []byte{9, 8, 7, 6}
	var payloads [][]byte
	for _, n := range []int{1, 125, 126, 1000, 1036, 16<<10 - 20, 16 << 10, 16<<10 + 1, 70000} {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(i * 7)
		}
		payloads = append(payloads, p)
	}
	send := func(how string) {
		var all []byte
		for _, p := range payloads {
			all = append(all, wsFrame(0x82, p, key)...)
		}
		switch how {
		case "whole":
			peer.Write(all)
		case "cut":
			for len(all) > 0 {
				n := min(len(all), 7)
				peer.Write(all[:n])
				all = all[n:]
				time.Sleep(time.Microsecond)
			}
		}
	}
	for _, how := range []string{"whole", "cut"} {
		go send(how)
		for i, want := range payloads {
			got := make([]byte, len(want))
			if _, err := io.ReadFull(c, got); err != nil {
				t.Fatalf("%s, frame %d: %v", how, i, err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s, frame %d of %d bytes: not what was sent", how, i, len(want))
			}
		}
		if lr.buf != nil {
			t.Errorf("%s: the reader holds a buffer once every frame is read", how)
		}
	}

	// The peer's end is the reader's.
	peer.Close()
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("read after the peer closed: %v, want EOF", err)
	}
}

// TestServerReadWaitingOverTCPEndsOnClose: closing a hub's connection ends
// the read that waits on its socket.
func TestServerReadWaitingOverTCPEndsOnClose(t *testing.T) {
	c, _ := tcpConn(t)
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		done <- err
	}()
	waitParked(t, 1, "IO wait", inWaitFrame, inPollWait) // the read waits for a frame
	c.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("the waiting read ended with %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting read went on after Close")
	}
}

// FuzzHandshake feeds both ends of the WebSocket handshake what the other
// end, or anything between, might send: the hub any request to /api/agent,
// and the agent any answer to its upgrade. The hub answers every request it
// won't upgrade with a 4xx, and upgrades only a GET with the WebSocket
// headers and a 16-byte key; the agent takes only a 101 that upgrades to a
// WebSocket with the accept its key asks for.
func FuzzHandshake(f *testing.F) {
	const key = "dGhlIHNhbXBsZSBub25jZQ=="
	f.Add([]byte("GET /api/agent HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: "+key+"\r\n\r\n"),
		[]byte("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: "+acceptKey(key)+"\r\n\r\n"))
	f.Add([]byte("POST /api/agent HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, upgrade\r\nUpgrade: WebSocket\r\nSec-WebSocket-Version: 8\r\n\r\n"),
		[]byte("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: x\r\nSec-WebSocket-Extensions: permessage-deflate\r\n\r\n"))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: h\r\nConnection: upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: AAAA\r\n\r\n"),
		[]byte("HTTP/1.1 503 Service Unavailable\r\nRetry-After: 5\r\nContent-Length: 0\r\n\r\n"))
	f.Fuzz(func(t *testing.T, request, answer []byte) {
		if r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(request))); err == nil {
			rec := httptest.NewRecorder() // can't be taken over: a good upgrade fails there, with 500
			if _, err := upgrade(rec, r); err == nil {
				t.Fatal("upgraded a connection that can't be taken over")
			}
			k, kerr := base64.StdEncoding.DecodeString(r.Header.Get("Sec-WebSocket-Key"))
			good := r.Method == http.MethodGet && headerHas(r.Header, "Connection", "upgrade") && headerHas(r.Header, "Upgrade", "websocket") &&
				r.Header.Get("Sec-WebSocket-Version") == "13" && kerr == nil && len(k) == 16
			if code := rec.Code; good != (code == http.StatusInternalServerError) || !good && (code < 400 || code >= 500) {
				t.Fatalf("answered %d to a request that is good: %v\n%q", code, good, request)
			}
		}
		if resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(answer)), nil); err == nil {
			if checkUpgrade(resp, key) == nil && (resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Sec-WebSocket-Accept") != acceptKey(key)) {
				t.Fatalf("took an answer that doesn't accept the key:\n%q", answer)
			}
		}
	})
}
