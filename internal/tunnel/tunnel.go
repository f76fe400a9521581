// Package tunnel carries many streams over one WebSocket. It runs a yamux
// session on a net.Conn view of the WebSocket, which gives each stream its
// own flow-control window: a stream nobody reads stops its sender and no
// other. docs/decisions/001-websocket-and-multiplexer.md says why these
// libraries and these settings.
//
// The agent dials and is the yamux client; the hub accepts and is the yamux
// server. Either side may open streams.
package tunnel

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/hashicorp/yamux"
)

// Config tunes a session. The zero value is not valid: start from
// DefaultConfig.
type Config struct {
	// StreamWindow is the most a stream's receiver buffers before its sender
	// must wait: the per-stream flow-control window. It also caps one
	// stream's rate at StreamWindow per round trip.
	StreamWindow uint32
	// WriteTimeout closes the session when one write to the WebSocket takes
	// longer: the peer has stopped reading altogether.
	WriteTimeout time.Duration
	// StreamCloseTimeout bounds how long a stream stays half-closed after
	// Close before it is reset, so a peer that never closes its side does not
	// leak the stream.
	StreamCloseTimeout time.Duration
	// OpenTimeout bounds how long an opened stream waits for the peer's
	// acknowledgement before the session is considered dead.
	OpenTimeout time.Duration
	// AcceptBacklog is how many streams may wait for Accept.
	AcceptBacklog int
}

// DefaultConfig returns the settings both sides start from.
func DefaultConfig() Config {
	return Config{
		StreamWindow:       1 << 20,
		WriteTimeout:       15 * time.Second,
		StreamCloseTimeout: 2 * time.Minute,
		OpenTimeout:        30 * time.Second,
		// yamux allocates the backlog as a channel up front: 1024 cost
		// 8 KiB per session, on the hub for every idle agent. Streams are
		// taken from it at once by an accept loop (decision 008).
		AcceptBacklog: 256,
	}
}

func (c Config) yamux() *yamux.Config {
	y := yamux.DefaultConfig()
	// Heartbeats belong to the control stream, where both sides see them and
	// the hub owns their interval; yamux's own would be a second clock.
	y.EnableKeepAlive = false
	y.MaxStreamWindowSize = c.StreamWindow
	y.ConnectionWriteTimeout = c.WriteTimeout
	y.StreamCloseTimeout = c.StreamCloseTimeout
	y.StreamOpenTimeout = c.OpenTimeout
	y.AcceptBacklog = c.AcceptBacklog
	y.LogOutput = io.Discard
	return y
}

// Session is one WebSocket carrying streams.
type Session struct {
	ws  *websocket.Conn
	mux *yamux.Session

	watcher      chan struct{} // closed when expireOnEnd has returned
	closeTimeout time.Duration // yamux's StreamCloseTimeout

	mu     sync.Mutex // guards the following
	ended  bool
	opened int // streams tracked, to sweep now and then
	// streams holds the open streams, to unblock when the session ends,
	// with when Close was called (zero while open). A closed stream may
	// still be read until its peer closes too, or until yamux resets it
	// after closeTimeout; only then is it forgotten.
	streams map[*stream]time.Time
}

// stream is a yamux stream its session keeps track of.
type stream struct {
	*yamux.Stream
	s *Session
}

func (st *stream) Close() error {
	st.s.mu.Lock()
	if _, ok := st.s.streams[st]; ok {
		st.s.streams[st] = time.Now()
	}
	st.s.mu.Unlock()
	return st.Stream.Close()
}

// track adds a new stream to the set, or expires it at once when the
// session has ended. Every 256 streams it forgets those closed longer
// ago than yamux waits before resetting them.
func (s *Session) track(y *yamux.Stream) net.Conn {
	st := &stream{Stream: y, s: s}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		y.SetDeadline(time.Now())
		return st
	}
	s.streams[st] = time.Time{}
	s.opened++
	if s.opened%256 == 0 {
		// A second more than the timeout: yamux's own timer has fired.
		gone := time.Now().Add(-s.closeTimeout - time.Second)
		for o, closed := range s.streams {
			if !closed.IsZero() && closed.Before(gone) {
				delete(s.streams, o)
			}
		}
	}
	return st
}

// expire makes every blocked and future Read and Write on the session's
// streams return at once. yamux v0.1.2 doesn't: a Read or Write waiting when
// its session ends spins until the session's Close gets to that stream
// (hashicorp/yamux#176), and Close gets to them one by one under a lock the
// spinning streams contend for; with a thousand streams open, that took
// minutes. A deadline in the past wakes each waiter and makes it return.
func (s *Session) expire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = true
	now := time.Now()
	for st := range s.streams {
		st.SetDeadline(now)
	}
	clear(s.streams)
}

// expireOnEnd expires the streams when the session ends from either side.
func (s *Session) expireOnEnd() {
	defer close(s.watcher)
	<-s.mux.CloseChan()
	s.expire()
}

// ErrClosed is returned by Open and Accept once the session is closed.
var ErrClosed = errors.New("tunnel: session closed")

func newSession(ws *websocket.Conn, cfg Config, client bool) (*Session, error) {
	open := yamux.Server
	if client {
		open = yamux.Client
	}
	mux, err := open(&wsConn{ws: ws}, cfg.yamux())
	if err != nil {
		ws.Close()
		return nil, fmt.Errorf("tunnel: start session: %w", err)
	}
	s := &Session{ws: ws, mux: mux, watcher: make(chan struct{}), closeTimeout: cfg.StreamCloseTimeout, streams: map[*stream]time.Time{}}
	go s.expireOnEnd()
	return s, nil
}

// DialOptions say how to reach the hub.
type DialOptions struct {
	// Header is sent with the upgrade request.
	Header http.Header
	// TLSConfig is for wss:// URLs; nil means the system's roots.
	TLSConfig *tls.Config
	// Proxy picks an HTTP proxy for the request, like
	// http.ProxyFromEnvironment; nil means none.
	Proxy func(*http.Request) (*url.URL, error)
}

// The agent's WebSocket buffer sizes. gorilla's client splits each message
// into frames of its write buffer's size: with its 4 KiB default every
// 32 KiB write became 8 masked frames, and 64 KiB halved the CPU an agent
// spends per byte sent (decision 001). The agent now writes frames of up to
// 256 KiB (its relay's reads), and 128 KiB takes them in two WebSocket
// frames instead of four (decision 008). The hub keeps the defaults: it
// pays per agent.
const (
	dialReadBuffer  = 64 << 10
	dialWriteBuffer = 128 << 10
)

// Dial connects to a hub's WebSocket at url (ws:// or wss://). Redirects are
// not followed. When the server answers the upgrade with anything but 101,
// the response is returned with the error, its body closed, so the caller
// can tell a 401 from a 503.
func Dial(ctx context.Context, url string, opts DialOptions, cfg Config) (*Session, *http.Response, error) {
	d := websocket.Dialer{
		Proxy:           opts.Proxy,
		TLSClientConfig: opts.TLSConfig,
		ReadBufferSize:  dialReadBuffer,
		WriteBufferSize: dialWriteBuffer,
	}
	ws, resp, err := d.DialContext(ctx, url, opts.Header)
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	if err != nil {
		return nil, resp, err
	}
	s, err := newSession(ws, cfg, true)
	return s, resp, err
}

// upgrader accepts agents. A zero read buffer size reuses the 4 KiB reader
// net/http already has for the request (decision 001). Writes take a 4 KiB
// buffer from writeBuffers for the length of one message, so an idle agent
// holds no write buffer: 4 KiB less per agent than keeping net/http's
// (decision 008). Origins are not checked: agents are not browsers, and they
// are authenticated by the request's token before the upgrade.
var upgrader = websocket.Upgrader{
	CheckOrigin:     func(*http.Request) bool { return true },
	WriteBufferPool: writeBuffers,
}

// writeBuffers lends the hub's WebSocket write buffers. A cache, not state:
// what it holds never changes what a connection does.
var writeBuffers = &sync.Pool{}

// Accept upgrades an HTTP request to a session. The caller has already
// decided to admit it.
func Accept(w http.ResponseWriter, r *http.Request, cfg Config) (*Session, error) {
	ws, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return nil, err
	}
	return newSession(ws, cfg, false)
}

// Open starts a new stream to the peer.
func (s *Session) Open(ctx context.Context) (net.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	st, err := s.mux.OpenStream()
	if err != nil {
		return nil, s.mapErr(err)
	}
	return s.track(st), nil
}

// Accept waits for the peer to open a stream.
func (s *Session) Accept(ctx context.Context) (net.Conn, error) {
	st, err := s.mux.AcceptStreamWithContext(ctx)
	if err != nil {
		return nil, s.mapErr(err)
	}
	return s.track(st), nil
}

func (s *Session) mapErr(err error) error {
	if errors.Is(err, yamux.ErrSessionShutdown) || s.mux.IsClosed() {
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	return err
}

// Done is closed when the session ends, from either side.
func (s *Session) Done() <-chan struct{} { return s.mux.CloseChan() }

// NumStreams is the number of streams open now.
func (s *Session) NumStreams() int { return s.mux.NumStreams() }

// Close ends every stream and the WebSocket at once. It may be called more
// than once, and returns once the session's goroutines are gone.
func (s *Session) Close() error {
	s.expire()
	err := s.mux.Close()
	<-s.watcher
	return err
}

// CloseWithReason sends a WebSocket close frame with code and reason, for
// proxies and debugging tools that show them, then closes. Tether's own peer
// learns why from the control stream before this; the close frame is a
// courtesy, given a second at most.
func (s *Session) CloseWithReason(code int, reason string) error {
	// WriteControl may run beside yamux's writer: gorilla allows it.
	s.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), time.Now().Add(time.Second))
	return s.Close()
}

// errNotBinary is returned when the peer sends a text message: the tunnel
// only carries binary ones.
var errNotBinary = errors.New("tunnel: a text message on the tunnel's WebSocket")

// wsConn is a net.Conn over a WebSocket, for yamux: each Write is one binary
// message, and Read runs through the messages as one byte stream. gorilla
// allows one reader and one writer at a time; yamux has exactly one of each
// (its receive and send loops), so wsConn adds no locking.
type wsConn struct {
	ws *websocket.Conn
	r  io.Reader // the message being read; nil between messages
}

func (c *wsConn) Read(p []byte) (int, error) {
	for {
		if c.r == nil {
			typ, r, err := c.ws.NextReader()
			if err != nil {
				if websocket.IsCloseError(err, websocket.CloseNormalClosure, websocket.CloseGoingAway) {
					return 0, io.EOF
				}
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

func (c *wsConn) Write(p []byte) (int, error) {
	if err := c.ws.WriteMessage(websocket.BinaryMessage, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Close drops the connection at once: yamux closes its conn when the session
// ends, whatever the reason, and a close handshake the peer may never answer
// would only delay that.
func (c *wsConn) Close() error                       { return c.ws.NetConn().Close() }
func (c *wsConn) LocalAddr() net.Addr                { return c.ws.LocalAddr() }
func (c *wsConn) RemoteAddr() net.Addr               { return c.ws.RemoteAddr() }
func (c *wsConn) SetDeadline(t time.Time) error      { return c.ws.NetConn().SetDeadline(t) }
func (c *wsConn) SetReadDeadline(t time.Time) error  { return c.ws.SetReadDeadline(t) }
func (c *wsConn) SetWriteDeadline(t time.Time) error { return c.ws.SetWriteDeadline(t) }
