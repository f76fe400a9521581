// Package tunnel carries many streams over one WebSocket, each with its own
// flow-control window: a stream nobody reads stops its sender and no other.
// The frames are yamux's (github.com/hashicorp/yamux/blob/master/spec.md);
// the implementation is Tether's own, one goroutine per session and no
// hand-offs between goroutines on a frame's way out. docs/decisions/001
// says why gorilla/websocket, and 010 why this multiplexer.
//
// The agent dials and numbers its streams odd; the hub accepts and numbers
// its streams even. Either side may open streams.
package tunnel

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// Config tunes a session. The zero value is not valid: start from
// DefaultConfig.
type Config struct {
	// StreamWindow is the most a stream's receiver buffers before its sender
	// must wait: the per-stream flow-control window. It also caps one
	// stream's rate at StreamWindow per round trip. At least 256 KiB, the
	// window every stream starts with.
	StreamWindow uint32
	// WriteTimeout ends the session when one write to the WebSocket takes
	// longer: the peer has stopped reading altogether.
	WriteTimeout time.Duration
	// StreamCloseTimeout bounds how long a closed stream waits for the
	// peer to finish its side before it is reset, so a peer that never
	// closes its side does not leak the stream.
	StreamCloseTimeout time.Duration
	// AcceptBacklog is how many streams may wait for Accept; past it, new
	// streams are reset.
	AcceptBacklog int
}

// DefaultConfig returns the settings both sides start from.
func DefaultConfig() Config {
	return Config{
		StreamWindow:       1 << 20,
		WriteTimeout:       15 * time.Second,
		StreamCloseTimeout: 2 * time.Minute,
		AcceptBacklog:      256,
	}
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
// spends per byte sent (decision 001). The write buffer holds the largest
// frame the tunnel writes with its header (gorilla adds room for its own),
// so each frame is one WebSocket frame (decision 010). The hub keeps the defaults: it pays
// per agent.
const (
	dialReadBuffer  = 64 << 10
	dialWriteBuffer = headerSize + maxFrame
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
	var batch *batchConn
	if strings.HasPrefix(url, "wss:") {
		// Under TLS, gather each frame's records into one write. The
		// dial runs in this goroutine; with a proxy, this is the
		// connection to the proxy, below every TLS layer.
		d.NetDialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			batch = &batchConn{Conn: c}
			return batch, nil
		}
	}
	ws, resp, err := d.DialContext(ctx, url, opts.Header)
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	if err != nil {
		return nil, resp, err
	}
	return newSession(&wsConn{ws: ws, batch: batch}, cfg, true), resp, nil
}

// batchConn is the agent's connection under TLS. crypto/tls writes each
// record of up to 16 KiB with a write of its own; while the session writes
// a frame, batchConn holds those writes and sends them together when the
// frame is done, so a 256 KiB frame costs one system call instead of
// seventeen (decision 010). Other writes (the TLS handshake, gorilla's
// control frames) pass straight through unless a frame is being written,
// in which case they go with it.
type batchConn struct {
	net.Conn
	mu      sync.Mutex // guards the following
	holding bool
	buf     []byte
}

func (c *batchConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.holding {
		return c.Conn.Write(p)
	}
	c.buf = append(c.buf, p...)
	return len(p), nil
}

// hold starts gathering writes.
func (c *batchConn) hold() {
	c.mu.Lock()
	c.holding = true
	c.mu.Unlock()
}

// release sends what was gathered, under the write deadline TLS set on the
// connection for the frame, and stops gathering.
func (c *batchConn) release() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.holding = false
	if len(c.buf) == 0 {
		return nil
	}
	_, err := c.Conn.Write(c.buf)
	c.buf = c.buf[:0]
	return err
}

// upgrader accepts agents. Its 1 KiB read buffer replaces the 4 KiB one
// net/http kept for the request, which gorilla would otherwise go on using
// (decision 001): the hub holds one per idle agent, and bulk data is read
// past it, straight into the streams' buffers (decision 010). Writes take a
// 4 KiB buffer from writeBuffers for the length of one message, so an idle
// agent holds no write buffer (decision 008). Origins are not checked:
// agents are not browsers, and they are authenticated by the request's
// token before the upgrade.
var upgrader = websocket.Upgrader{
	CheckOrigin:     func(*http.Request) bool { return true },
	ReadBufferSize:  1 << 10,
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
	return newSession(&wsConn{ws: ws}, cfg, false), nil
}

// CloseWithReason sends a WebSocket close frame with code and reason, for
// proxies and debugging tools that show them, then closes. Tether's own peer
// learns why from the control stream before this; the close frame is a
// courtesy, given a second at most.
func (s *Session) CloseWithReason(code int, reason string) error {
	// WriteControl may run beside another writer: gorilla allows it.
	if c, ok := s.t.(*wsConn); ok {
		c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), time.Now().Add(time.Second))
	}
	return s.Close()
}

// errNotBinary is returned when the peer sends a text message: the tunnel
// only carries binary ones.
var errNotBinary = errors.New("tunnel: a text message on the tunnel's WebSocket")

// wsConn carries frames over a WebSocket: each frame goes out as one
// binary message, and Read runs through the peer's messages as one byte
// stream, so a peer may split frames across messages or join them (yamux
// writes a data frame's header and body as two). gorilla allows one reader
// and one writer at a time: the session has one read loop, and writes
// under its write lock.
type wsConn struct {
	ws    *websocket.Conn
	batch *batchConn // under the agent's TLS; nil elsewhere
	r     io.Reader  // the message being read; nil between messages
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

func (c *wsConn) WriteFrame(hdr, body []byte, deadline time.Time) error {
	if c.batch == nil {
		return c.writeFrame(hdr, body, deadline)
	}
	c.batch.hold()
	err := c.writeFrame(hdr, body, deadline)
	if rerr := c.batch.release(); err == nil {
		err = rerr
	}
	return err
}

func (c *wsConn) writeFrame(hdr, body []byte, deadline time.Time) error {
	c.ws.SetWriteDeadline(deadline)
	w, err := c.ws.NextWriter(websocket.BinaryMessage)
	if err != nil {
		return err
	}
	if _, err := w.Write(hdr); err != nil {
		return err
	}
	if _, err := w.Write(body); err != nil {
		return err
	}
	return w.Close()
}

// Close drops the connection at once: a close handshake the peer may never
// answer would only delay the end.
func (c *wsConn) Close() error         { return c.ws.NetConn().Close() }
func (c *wsConn) LocalAddr() net.Addr  { return c.ws.LocalAddr() }
func (c *wsConn) RemoteAddr() net.Addr { return c.ws.RemoteAddr() }
