// Package tunnel carries many streams over one WebSocket, each with its own
// flow-control window: a stream nobody reads stops its sender and no other.
// The frames are yamux's (github.com/hashicorp/yamux/blob/master/spec.md);
// the implementation is Tether's own, one goroutine per session and no
// hand-offs between goroutines on a frame's way out, over a WebSocket whose
// framing is Tether's own too. docs/decisions/010 says why this
// multiplexer, and 011 why this WebSocket.
//
// The agent dials and numbers its streams odd; the hub accepts and numbers
// its streams even. Either side may open streams.
package tunnel

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"
)

// Config tunes a session. A field left zero takes its default, the value
// DefaultConfig has, so a caller sets just the fields it cares about.
// VerifyConfig says what is wrong with the rest.
type Config struct {
	// StreamWindow is the most a stream's receiver buffers before its sender
	// must wait: the per-stream flow-control window. It also caps one
	// stream's rate at its window per round trip. At least 256 KiB, the
	// window every stream starts with; 0 takes 1 MiB.
	StreamWindow uint32
	// MaxStreamWindow is as far as a stream's window grows. It doubles each
	// time the sender tells the receiver it waits for window while the
	// receiver's reader keeps up: then the window, not the reader, holds
	// the stream back, as on a long round trip (decision 023). A reader that
	// falls behind leaves it as it is. At most StreamWindow: no growth;
	// 0 takes 8 MiB.
	MaxStreamWindow uint32
	// MaxWindowGrowth is how many bytes all of a session's streams together
	// may have grown their windows by, past what each started with. A
	// reader that kept up and then stops leaves its stream's whole window
	// to buffer here; this bounds what grown windows add to that, however
	// many streams grew. A stream gives its growth back when it ends.
	// 0 takes 16 MiB; negative: no growth.
	MaxWindowGrowth int
	// WriteTimeout ends the session when one write to the WebSocket takes
	// longer: the peer has stopped reading altogether. 0 takes 15 s; there
	// is no "none", since a peer that stops reading would hold every
	// writer for ever.
	WriteTimeout time.Duration
	// StreamCloseTimeout bounds how long a closed stream waits for the
	// peer to finish its side before it is reset, so a peer that never
	// closes its side does not leak the stream. 0 takes 2 minutes; there
	// is no "none", for the same leak.
	StreamCloseTimeout time.Duration
	// AcceptBacklog is how many streams may wait for Accept; past it, new
	// streams are reset. 0 takes 256.
	AcceptBacklog int
	// MaxPeerStreams is how many streams the peer may have open at once
	// that it opened itself; past it, a new one is reset at once, and costs
	// nothing. 0, the default: no bound. An agent opens two streams to the
	// hub (its control stream and the inventory), so the hub bounds its
	// agents' to a few: a token holder can't make it keep streams without
	// end.
	MaxPeerStreams int
}

// DefaultConfig returns the settings both sides start from: what a zero
// field takes.
func DefaultConfig() Config {
	return Config{
		StreamWindow:       1 << 20,
		MaxStreamWindow:    8 << 20,
		MaxWindowGrowth:    16 << 20, // room for two streams at MaxStreamWindow
		WriteTimeout:       15 * time.Second,
		StreamCloseTimeout: 2 * time.Minute,
		AcceptBacklog:      256,
	}
}

// withDefaults returns c with each zero field set to DefaultConfig's.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.StreamWindow == 0 {
		c.StreamWindow = d.StreamWindow
	}
	if c.MaxStreamWindow == 0 {
		c.MaxStreamWindow = d.MaxStreamWindow
	}
	if c.MaxWindowGrowth == 0 {
		c.MaxWindowGrowth = d.MaxWindowGrowth
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = d.WriteTimeout
	}
	if c.StreamCloseTimeout == 0 {
		c.StreamCloseTimeout = d.StreamCloseTimeout
	}
	if c.AcceptBacklog == 0 {
		c.AcceptBacklog = d.AcceptBacklog
	}
	return c
}

// VerifyConfig says what is wrong with c, naming the field, its value and
// the rule; nil when a session may use it. Zero fields are fine: they take
// their defaults. Dial and Accept call it.
func VerifyConfig(c Config) error {
	switch {
	case c.StreamWindow != 0 && c.StreamWindow < initialWindow:
		return fmt.Errorf("tunnel: StreamWindow is %d; it must be at least %d (256 KiB, the window every stream starts with), or 0 for the default", c.StreamWindow, initialWindow)
	case c.WriteTimeout < 0:
		return fmt.Errorf("tunnel: WriteTimeout is %v; it must be positive, or 0 for the default", c.WriteTimeout)
	case c.StreamCloseTimeout < 0:
		return fmt.Errorf("tunnel: StreamCloseTimeout is %v; it must be positive, or 0 for the default", c.StreamCloseTimeout)
	case c.AcceptBacklog < 0:
		return fmt.Errorf("tunnel: AcceptBacklog is %d; it must be positive, or 0 for the default", c.AcceptBacklog)
	case c.MaxPeerStreams < 0:
		return fmt.Errorf("tunnel: MaxPeerStreams is %d; it must be positive, or 0 for no bound", c.MaxPeerStreams)
	}
	return nil
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
	// DialContext, when set, makes the connection to the server instead
	// of a TCP dial, and Proxy is not used.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
}

// The agent reads through a 64 KiB buffer: it reads what the hub sends in
// few system calls (decision 001). The hub reads through 1 KiB, since it
// holds one per idle agent; bulk data is read past either, straight into
// the streams' buffers (decision 010).
const (
	dialReadBuffer   = 64 << 10
	acceptReadBuffer = 1 << 10
)

// Dial connects to a hub's WebSocket at url (ws:// or wss://). Redirects are
// not followed. When the server answers the upgrade with anything but 101,
// the response is returned with the error, its body closed, so the caller
// can tell a 401 from a 503.
func Dial(ctx context.Context, url string, opts DialOptions, cfg Config) (*Session, *http.Response, error) {
	if err := VerifyConfig(cfg); err != nil {
		return nil, nil, err
	}
	cfg = cfg.withDefaults()
	up, resp, err := dialWebSocket(ctx, url, opts)
	if err != nil {
		return nil, resp, err
	}
	return newSession(up.wsConn(dialReadBuffer, cfg), cfg, true), resp, nil
}

// Accept upgrades an HTTP request to a session. The caller has already
// decided to admit it; origins are not checked, since agents are not
// browsers and are authenticated by the request's token. A request that is
// no WebSocket upgrade is answered with an error, and so is one that comes
// with a cfg VerifyConfig rejects: a 500, since the fault is the server's.
func Accept(w http.ResponseWriter, r *http.Request, cfg Config) (*Session, error) {
	if err := VerifyConfig(cfg); err != nil {
		http.Error(w, "the tunnel's settings are wrong", http.StatusInternalServerError)
		return nil, err
	}
	cfg = cfg.withDefaults()
	conn, err := upgrade(w, r)
	if err != nil {
		return nil, err
	}
	return newSession(newWSConn(conn, conn, acceptReadBuffer, false, cfg), cfg, false), nil
}

// CloseWithReason sends a WebSocket close frame with code and reason, for
// proxies and debugging tools that show them, then closes. Tether's own peer
// learns why from the control stream before this; the close frame is a
// courtesy, given a second at most.
func (s *Session) CloseWithReason(code int, reason string) error {
	if c, ok := s.t.(*wsConn); ok {
		c.writeClose(code, reason)
	}
	return s.Close()
}
