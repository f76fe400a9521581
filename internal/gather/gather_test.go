package gather

import (
	"bytes"
	"net"
	"sync"
	"testing"
)

// writesConn records each write that reaches it, as a socket would see
// them.
type writesConn struct {
	net.Conn
	mu     sync.Mutex
	writes [][]byte
}

func (c *writesConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes = append(c.writes, bytes.Clone(p))
	return len(p), nil
}

func (c *writesConn) taken() [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.writes
	c.writes = nil
	return w
}

func TestConnHoldsWritesUntilRelease(t *testing.T) {
	rec := &writesConn{}
	g := &Conn{Conn: rec, Limit: 64 << 10}

	g.Write([]byte("passes "))
	if w := rec.taken(); len(w) != 1 || string(w[0]) != "passes " {
		t.Fatalf("a write while not holding: %q", w)
	}

	g.Hold()
	for _, s := range []string{"one ", "two ", "three"} {
		if n, err := g.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if w := rec.taken(); len(w) != 0 {
		t.Fatalf("writes went out while held: %q", w)
	}
	if err := g.Release(); err != nil {
		t.Fatal(err)
	}
	if w := rec.taken(); len(w) != 1 || string(w[0]) != "one two three" {
		t.Fatalf("released as %q, want one write", w)
	}
	if err := g.Release(); err != nil {
		t.Fatal(err)
	}
	if w := rec.taken(); len(w) != 0 {
		t.Fatalf("a second release wrote %q", w)
	}

	// Past the limit, what waits goes out at once, in order.
	g.Hold()
	a, b := bytes.Repeat([]byte("a"), g.Limit-10), bytes.Repeat([]byte("b"), 20)
	g.Write(a)
	if n, err := g.Write(b); n != len(b) || err != nil {
		t.Fatalf("a write past the limit: %d, %v", n, err)
	}
	g.Write([]byte("c"))
	g.Release()
	if got := bytes.Join(rec.taken(), nil); !bytes.Equal(got, append(append(a, b...), 'c')) {
		t.Fatalf("past the limit, %d bytes came out of order or lost", len(got))
	}
}

func TestCloseDropsWhatWaits(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	g := &Conn{Conn: server}
	g.Hold()
	g.Write([]byte("never sent"))
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if g.buf != nil || g.holding {
		t.Error("Close kept the buffer or the hold")
	}
	if err := g.Release(); err != nil {
		t.Errorf("release after Close: %v", err)
	}
	if _, err := g.Write([]byte("x")); err == nil {
		t.Error("a write after Close succeeded")
	}
}

// TestConnWithoutLimitHoldsEverything: with no limit, as the agent's
// connection has, a frame's records all go out in one write.
func TestConnWithoutLimitHoldsEverything(t *testing.T) {
	rec := &writesConn{}
	g := &Conn{Conn: rec}
	g.Hold()
	record := bytes.Repeat([]byte("r"), 16<<10)
	for range 17 {
		g.Write(record)
	}
	g.Release()
	if w := rec.taken(); len(w) != 1 || len(w[0]) != 17*len(record) {
		t.Fatalf("17 records went out in %d writes", len(w))
	}
}
