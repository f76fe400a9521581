// Package gather holds a connection's writes and sends them with one
// system call. It sits under a TLS connection, which writes each record
// (up to 16 KiB) with a write of its own: the agent gathers the records of
// one tunnel frame (decision 010), the hub those of one flushed piece of an
// answer (decision 022).
package gather

import (
	"net"
	"sync"
)

// Conn passes writes straight through to the connection it wraps, except
// between Hold and Release, when they wait in a pooled buffer and go out
// together on Release. Other writers (TLS alerts) go along with what is
// held. Limit, when above zero, bounds what waits: past it, what waits goes
// out at once.
type Conn struct {
	net.Conn
	Limit int

	mu      sync.Mutex // guards the following, and orders writes
	holding bool
	buf     *[]byte // what waits; nil when nothing does
}

// buffers lend Conns their buffers, held only from a write to the Release
// after it. A cache, not state.
var buffers = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

func (c *Conn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.holding {
		return c.Conn.Write(p)
	}
	if c.buf == nil {
		c.buf = buffers.Get().(*[]byte)
	}
	if c.Limit <= 0 || len(*c.buf)+len(p) <= c.Limit {
		*c.buf = append(*c.buf, p...)
		return len(p), nil
	}
	// Too much to hold: what waits and p go out together.
	bufs := net.Buffers{*c.buf, p}
	n, err := bufs.WriteTo(c.Conn)
	held := int64(len(*c.buf))
	c.drop()
	return int(max(n-held, 0)), err
}

// Hold makes writes wait until Release.
func (c *Conn) Hold() {
	c.mu.Lock()
	c.holding = true
	c.mu.Unlock()
}

// Release sends what waits, in one write, and lets writes through again.
func (c *Conn) Release() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.holding = false
	if c.buf == nil {
		return nil
	}
	_, err := c.Conn.Write(*c.buf)
	c.drop()
	return err
}

// drop returns the buffer. c.mu is held.
func (c *Conn) drop() {
	*c.buf = (*c.buf)[:0]
	buffers.Put(c.buf)
	c.buf = nil
}

// Close closes the connection first, which ends a write in progress, then
// drops what waits.
func (c *Conn) Close() error {
	err := c.Conn.Close()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.holding = false
	if c.buf != nil {
		c.drop()
	}
	return err
}
