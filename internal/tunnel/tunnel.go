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
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/coder/websocket"
	"github.com/hashicorp/yamux"
)

// Config tunes a session. The zero value is not valid: start from
// DefaultConfig.
type Config struct {
	// StreamWindow is the most a stream's receiver buffers before its sender
	// must wait: the per-stream flow-control window.
	StreamWindow uint32
	// WriteTimeout closes the session when one write to the WebSocket takes
	// longer: the peer has stopped reading altogether.
	WriteTimeout time.Duration
	// StreamCloseTimeout bounds how long a stream stays half-closed after
	// Close before it is reset, so a peer that never closes its side does not
	// leak the stream.
	StreamCloseTimeout time.Duration
	// OpenTimeout bounds how long Open waits for the peer to acknowledge a
	// new stream before the session is considered dead.
	OpenTimeout time.Duration
	// AcceptBacklog is how many streams may wait for Accept.
	AcceptBacklog int
}

// DefaultConfig returns the settings both sides use.
func DefaultConfig() Config {
	return Config{
		StreamWindow:       4 << 20,
		WriteTimeout:       15 * time.Second,
		StreamCloseTimeout: 2 * time.Minute,
		OpenTimeout:        30 * time.Second,
		AcceptBacklog:      1024,
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
}

// ErrClosed is returned by Open and Accept once the session is closed.
var ErrClosed = errors.New("tunnel: session closed")

func newSession(ws *websocket.Conn, cfg Config, client bool) (*Session, error) {
	// yamux frames are up to a window long; the read limit is for messages
	// from people's browsers, not for our own framing.
	ws.SetReadLimit(-1)
	nc := &abortingConn{Conn: websocket.NetConn(context.Background(), ws, websocket.MessageBinary), ws: ws}
	open := yamux.Server
	if client {
		open = yamux.Client
	}
	mux, err := open(nc, cfg.yamux())
	if err != nil {
		ws.CloseNow()
		return nil, fmt.Errorf("tunnel: start session: %w", err)
	}
	return &Session{ws: ws, mux: mux}, nil
}

// Dial connects to a hub's WebSocket at url (ws:// or wss://) with the given
// request headers. On a refused upgrade the response is returned too, so the
// caller can tell a 401 from a 503; its body is closed.
func Dial(ctx context.Context, url string, header http.Header, client *http.Client, cfg Config) (*Session, *http.Response, error) {
	ws, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{
		HTTPClient: client,
		HTTPHeader: header,
	})
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	if err != nil {
		return nil, resp, err
	}
	s, err := newSession(ws, cfg, true)
	return s, resp, err
}

// Accept upgrades an HTTP request to a session. The caller has already
// decided to admit it.
func Accept(w http.ResponseWriter, r *http.Request, cfg Config) (*Session, error) {
	ws, err := websocket.Accept(w, r, nil)
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
	return st, nil
}

// Accept waits for the peer to open a stream.
func (s *Session) Accept(ctx context.Context) (net.Conn, error) {
	st, err := s.mux.AcceptStreamWithContext(ctx)
	if err != nil {
		return nil, s.mapErr(err)
	}
	return st, nil
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
	return s.mux.Close()
}

// CloseWithReason sends a WebSocket close frame with code and reason, for
// proxies and debugging tools that show them, then closes. Tether's own peer
// learns why from the control stream before this; the close frame is a
// courtesy and is not waited on for long.
func (s *Session) CloseWithReason(code websocket.StatusCode, reason string) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.ws.Close(code, reason)
	}()
	select {
	case <-done:
	case <-time.After(time.Second):
		s.ws.CloseNow()
		<-done
	}
	return s.mux.Close()
}

// abortingConn makes Close drop the WebSocket at once. yamux closes its conn
// when the session ends, whatever the reason; coder/websocket's Close would
// wait up to seconds for a close handshake the peer may never answer.
type abortingConn struct {
	net.Conn
	ws *websocket.Conn
}

func (c *abortingConn) Close() error {
	err := c.ws.CloseNow()
	c.Conn.Close() // stops the NetConn's timers; the WebSocket is already closed, so no handshake
	return err
}
