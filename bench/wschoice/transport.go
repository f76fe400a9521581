package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	coder "github.com/coder/websocket"
	gorilla "github.com/gorilla/websocket"
)

// transport turns one HTTP request into a net.Conn on the hub side and dials
// one from the agent side. Both ends of every case use the same transport.
type transport interface {
	// accept upgrades the request. The returned net.Conn stays valid until
	// it is closed; the handler must not return before that.
	accept(w http.ResponseWriter, r *http.Request) (net.Conn, error)
	// dial connects to url. ctx bounds only the handshake.
	dial(ctx context.Context, url string) (net.Conn, error)
}

// coderTransport uses github.com/coder/websocket and its NetConn adapter.
// NetConn calls SetReadLimit(-1) itself, so yamux frames larger than the
// default 32 KiB message limit are accepted.
type coderTransport struct{}

func (coderTransport) accept(w http.ResponseWriter, r *http.Request) (net.Conn, error) {
	c, err := coder.Accept(w, r, &coder.AcceptOptions{
		CompressionMode: coder.CompressionDisabled,
	})
	if err != nil {
		return nil, fmt.Errorf("coder accept: %w", err)
	}
	// Not r.Context(): coder documents it as unreliable after Accept.
	return coder.NetConn(context.Background(), c, coder.MessageBinary), nil
}

func (coderTransport) dial(ctx context.Context, url string) (net.Conn, error) {
	c, _, err := coder.Dial(ctx, url, &coder.DialOptions{
		CompressionMode: coder.CompressionDisabled,
	})
	if err != nil {
		return nil, fmt.Errorf("coder dial %s: %w", url, err)
	}
	return coder.NetConn(context.Background(), c, coder.MessageBinary), nil
}

// gorillaBufs are the gorilla buffer settings of one side. Zero sizes mean
// the library defaults: on the server the 4 KiB buffers net/http already
// allocated for the request, on the client 4 KiB each.
type gorillaBufs struct {
	read, write int
	pool        gorilla.BufferPool // nil: each conn keeps its own write buffer
}

// gorillaTransport uses github.com/gorilla/websocket with gorillaConn as the
// net.Conn adapter. The hub and the agent may use different buffers: the hub
// pays for them once per agent, the agent only once.
type gorillaTransport struct {
	hub, agent gorillaBufs
}

func (t gorillaTransport) accept(w http.ResponseWriter, r *http.Request) (net.Conn, error) {
	u := gorilla.Upgrader{
		ReadBufferSize:    t.hub.read,
		WriteBufferSize:   t.hub.write,
		WriteBufferPool:   t.hub.pool,
		EnableCompression: false,
		CheckOrigin:       func(*http.Request) bool { return true },
	}
	c, err := u.Upgrade(w, r, nil)
	if err != nil {
		return nil, fmt.Errorf("gorilla upgrade: %w", err)
	}
	return &gorillaConn{ws: c}, nil
}

func (t gorillaTransport) dial(ctx context.Context, url string) (net.Conn, error) {
	d := gorilla.Dialer{
		ReadBufferSize:    t.agent.read,
		WriteBufferSize:   t.agent.write,
		WriteBufferPool:   t.agent.pool,
		EnableCompression: false,
		HandshakeTimeout:  10 * time.Second,
	}
	c, _, err := d.DialContext(ctx, url, nil)
	if err != nil {
		return nil, fmt.Errorf("gorilla dial %s: %w", url, err)
	}
	return &gorillaConn{ws: c}, nil
}

// errNotBinary is returned by gorillaConn.Read when the peer sends a text
// message; the tunnel only carries binary messages.
var errNotBinary = errors.New("websocket: text message on a binary tunnel")

// gorillaConn is a net.Conn over a gorilla WebSocket: each Write is one binary
// message, Read walks the messages with NextReader. gorilla allows one reader
// and one writer at a time; yamux has exactly one of each (recvLoop and
// sendLoop), so gorillaConn adds no locking of its own.
type gorillaConn struct {
	ws        *gorilla.Conn
	r         io.Reader // current message, nil between messages
	closeOnce sync.Once
}

func (c *gorillaConn) Read(p []byte) (int, error) {
	for {
		if c.r == nil {
			typ, r, err := c.ws.NextReader()
			if err != nil {
				if gorilla.IsCloseError(err, gorilla.CloseNormalClosure, gorilla.CloseGoingAway) {
					return 0, io.EOF
				}
				return 0, err
			}
			if typ != gorilla.BinaryMessage {
				return 0, errNotBinary
			}
			c.r = r
		}
		n, err := c.r.Read(p)
		if err == io.EOF {
			c.r = nil
			if n > 0 {
				return n, nil
			}
			continue
		}
		return n, err
	}
}

func (c *gorillaConn) Write(p []byte) (int, error) {
	if err := c.ws.WriteMessage(gorilla.BinaryMessage, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Close sends a normal close frame (WriteControl may run concurrently with
// the writer) and closes the TCP connection without waiting for the reply.
func (c *gorillaConn) Close() error {
	err := net.ErrClosed
	c.closeOnce.Do(func() {
		msg := gorilla.FormatCloseMessage(gorilla.CloseNormalClosure, "")
		_ = c.ws.WriteControl(gorilla.CloseMessage, msg, time.Now().Add(time.Second))
		err = c.ws.Close()
	})
	return err
}

func (c *gorillaConn) LocalAddr() net.Addr  { return c.ws.LocalAddr() }
func (c *gorillaConn) RemoteAddr() net.Addr { return c.ws.RemoteAddr() }

func (c *gorillaConn) SetDeadline(t time.Time) error {
	return errors.Join(c.ws.SetReadDeadline(t), c.ws.SetWriteDeadline(t))
}
func (c *gorillaConn) SetReadDeadline(t time.Time) error  { return c.ws.SetReadDeadline(t) }
func (c *gorillaConn) SetWriteDeadline(t time.Time) error { return c.ws.SetWriteDeadline(t) }

// coalescer joins a yamux data-frame header with the body that follows it so
// that each yamux frame travels as one WebSocket message instead of two.
// yamux v0.1.2's sendLoop is the only writer and always writes a data header
// whose length field is non-zero immediately followed by exactly that body;
// window updates, pings and go-aways carry a length but no body, so they pass
// straight through. Not safe for concurrent Write.
type coalescer struct {
	net.Conn
	buf  []byte
	held bool
}

const (
	yamuxHeaderSize = 12
	yamuxTypeData   = 0
)

func (c *coalescer) Write(p []byte) (int, error) {
	if c.held {
		c.held = false
		c.buf = append(c.buf, p...)
		_, err := c.Conn.Write(c.buf)
		if cap(c.buf) > 64<<10 {
			c.buf = nil // do not pin a large body buffer on an idle session
		}
		if err != nil {
			return 0, err
		}
		return len(p), nil
	}
	if len(p) == yamuxHeaderSize && p[1] == yamuxTypeData &&
		(p[8]|p[9]|p[10]|p[11]) != 0 {
		c.buf = append(c.buf[:0], p...)
		c.held = true
		return len(p), nil
	}
	return c.Conn.Write(p)
}
