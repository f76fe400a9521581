package hub

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
)

// An answer of unknown length (a chunked list, a watch, logs -f) is
// flushed after every write the proxy makes, and net/http's chunked framing
// turns each 32 KiB write and flush into four writes to the client's TLS
// connection: the chunk's head and the first 4 KiB, the rest of the data in
// one or two records, and the chunk's closing line, two bytes in a record of
// its own. Each was a system call. While the proxy writes one piece of such
// an answer, the client's connection under TLS gathers them and sends them
// with one system call when the piece is flushed (decision 022).

// gatherLimit bounds what a gathering connection holds: past it, what it
// holds goes out at once.
const gatherLimit = 64 << 10

// gatherConn is a client's connection under the hub's TLS. Between hold and
// release what is written to it waits in a pooled buffer; otherwise writes
// pass straight through. Only HTTP/1 handlers hold it: an HTTP/2
// connection's writes are its server's, not one request's.
type gatherConn struct {
	net.Conn

	mu      sync.Mutex // guards the following, and orders writes
	holding bool
	buf     *[]byte // what waits, while holding; nil when nothing does
}

// gatherBuffers lend gathering connections their buffers, held only from a
// write to the release after it. A cache, not state.
var gatherBuffers = sync.Pool{New: func() any { b := make([]byte, 0, gatherLimit); return &b }}

func (g *gatherConn) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.holding {
		return g.Conn.Write(p)
	}
	if g.buf == nil {
		g.buf = gatherBuffers.Get().(*[]byte)
	}
	if len(*g.buf)+len(p) <= gatherLimit {
		*g.buf = append(*g.buf, p...)
		return len(p), nil
	}
	// Too much to hold: what waits and p go out together.
	bufs := net.Buffers{*g.buf, p}
	n, err := bufs.WriteTo(g.Conn)
	held := int64(len(*g.buf))
	g.drop()
	return int(max(n-held, 0)), err
}

// hold makes writes wait until release.
func (g *gatherConn) hold() {
	g.mu.Lock()
	g.holding = true
	g.mu.Unlock()
}

// release sends what waits, in one write, and lets writes through again.
func (g *gatherConn) release() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.holding = false
	if g.buf == nil {
		return nil
	}
	_, err := g.Conn.Write(*g.buf)
	g.drop()
	return err
}

// drop returns the buffer. g.mu is held.
func (g *gatherConn) drop() {
	*g.buf = (*g.buf)[:0]
	gatherBuffers.Put(g.buf)
	g.buf = nil
}

// Close closes the connection first, which ends a write in progress, then
// drops what waits.
func (g *gatherConn) Close() error {
	err := g.Conn.Close()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.holding = false
	if g.buf != nil {
		g.drop()
	}
	return err
}

// gatherListener makes each accepted connection a gatherConn.
type gatherListener struct{ net.Listener }

func (l gatherListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &gatherConn{Conn: c}, nil
}

// gatherKey is the context key of a request's gatherConn.
type gatherKey struct{}

// withGatherConn is the server's ConnContext: it keeps the gatherConn under
// a TLS connection where handlers can find it.
func withGatherConn(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*tls.Conn); ok {
		if g, ok := tc.NetConn().(*gatherConn); ok {
			return context.WithValue(ctx, gatherKey{}, g)
		}
	}
	return ctx
}

// gatherConnOf returns the connection an HTTP/1 request came on, when it
// can gather; nil otherwise.
func gatherConnOf(ctx context.Context, protoMajor int) *gatherConn {
	if protoMajor != 1 {
		return nil
	}
	g, _ := ctx.Value(gatherKey{}).(*gatherConn)
	return g
}
