package kubeproxy

import (
	"context"
	"crypto/tls"
	"net"

	"github.com/tetherhq/tether/internal/gather"
)

// An answer of unknown length (a chunked list, a watch, logs -f) is
// flushed after every write the proxy makes, and net/http's chunked framing
// turns each 32 KiB write and flush into four writes to the client's TLS
// connection: the chunk's head and the first 4 KiB, the rest of the data in
// one or two records, and the chunk's closing line, two bytes in a record of
// its own. Each was a system call. While the proxy writes one piece of such
// an answer, the client's connection under TLS gathers them and sends them
// with one system call when the piece is flushed (decision 022).

// gatherLimit bounds what a client's connection holds: past it, what it
// holds goes out at once.
const gatherLimit = 64 << 10

// GatherListener wraps each connection it accepts in a gather.Conn, under
// the TLS. Only HTTP/1 handlers hold it: an HTTP/2 connection's writes are
// its server's, not one request's.
type GatherListener struct{ net.Listener }

func (l GatherListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &gather.Conn{Conn: c, Limit: gatherLimit}, nil
}

// gatherKey is the context key of a request's gather.Conn.
type gatherKey struct{}

// WithGatherConn is the server's ConnContext: it keeps the gather.Conn
// under a TLS connection where handlers can find it.
func WithGatherConn(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*tls.Conn); ok {
		if g, ok := tc.NetConn().(*gather.Conn); ok {
			return context.WithValue(ctx, gatherKey{}, g)
		}
	}
	return ctx
}

// gatherConnOf returns the connection an HTTP/1 request came on, when it
// can gather; nil otherwise.
func gatherConnOf(ctx context.Context, protoMajor int) *gather.Conn {
	if protoMajor != 1 {
		return nil
	}
	g, _ := ctx.Value(gatherKey{}).(*gather.Conn)
	return g
}
