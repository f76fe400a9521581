package tunnel

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// What a stream whose reader at the other end is behind costs: no more than
// its window, at either end (issue 33: 400 slow readers of a list held
// 484 MB in the hub's stream buffers and 100 MiB in the agent's).

// endless is a source that always has 32 KiB more to give, and counts them.
type endless struct{ reads, given atomic.Int64 }

func (e *endless) Read(p []byte) (int, error) {
	n := min(len(p), 32<<10)
	e.reads.Add(1)
	e.given.Add(int64(n))
	return n, nil
}

// TestReadFromReadsNoMoreThanItsWindow: ReadFrom reads from its source no
// more than the window lets it send, so a stream out of window holds no
// buffer of its source's bytes while it waits.
func TestReadFromReadsNoMoreThanItsWindow(t *testing.T) {
	s, peer := rawPeer(t)
	frames := framesFrom(peer)
	peer.Write(frame(header{typ: typeWindow, flags: flagSYN, stream: 2})) // a window of 256 KiB
	st := accept(t, s)
	next(t, frames) // the ACK
	src := &endless{}
	go st.(*stream).ReadFrom(src)
	sent := 0
	for sent < initialWindow {
		h := next(t, frames)
		if h.typ != typeData {
			t.Fatalf("after %d bytes of data: %s, want data up to the window", sent, h)
		}
		sent += int(h.length)
	}
	if h := next(t, frames); h != (header{typ: typeWindow, flags: flagWaiting, stream: 2}) {
		t.Fatalf("after the window's worth: %s, want a window frame flagged waiting", h)
	}
	if got := src.given.Load(); got != initialWindow {
		t.Fatalf("ReadFrom read %d bytes of its source by the time it waited for window, want the window's %d", got, initialWindow)
	}
	st.Close()
}

// TestSlowReaderHoldsItsWindow: what waits for a reader that is behind is
// held in chunks filled before the next is taken, so the memory is what
// the window let in, not a chunk of the frame's size class for every frame.
func TestSlowReaderHoldsItsWindow(t *testing.T) {
	s, peer := rawPeer(t)
	frames := framesFrom(peer)
	peer.Write(frame(header{typ: typeWindow, flags: flagSYN, stream: 2}))
	st := accept(t, s).(*stream)
	next(t, frames)              // the ACK, with the window of 1 MiB
	body := make([]byte, 70<<10) // each in a chunk of 256 KiB, as it comes
	const count = 14
	for range count {
		peer.Write(frame(header{typ: typeData, stream: 2, length: uint32(len(body))}, body...))
	}
	waitFor(t, "the frames to arrive", func() bool {
		st.mu.Lock()
		defer st.mu.Unlock()
		return st.unreadLocked() == count*len(body)
	})
	st.mu.Lock()
	held := 0
	for _, c := range st.chunks {
		held += cap(*c)
	}
	st.mu.Unlock()
	if want := count*len(body) + behindChunk; held > want {
		t.Fatalf("%d bytes unread are held in %d bytes of chunks, want at most %d", count*len(body), held, want)
	}
}

// TestReadFromBuffersAreBounded: streams whose sources all have bytes, on a
// connection that takes nothing, fill no more than maxSending buffers
// between them while they wait for it.
func TestReadFromBuffersAreBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := &stuckTransport{in: make(chan []byte, 256), closed: make(chan struct{})}
		s := newSession(tr, DefaultConfig(), true)
		defer s.Close()
		const n = 3 * maxSending
		streams := make([]*stream, n)
		for i := range streams {
			tr.in <- frame(header{typ: typeWindow, flags: flagSYN, stream: uint32(2 * (i + 1))})
			st, err := s.Accept(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			streams[i] = st.(*stream)
		}
		// From now on the connection takes nothing: the first frame
		// written holds it, and every other stream's waits.
		tr.stuck.Store(true)
		src := &endless{}
		for _, st := range streams {
			go st.ReadFrom(src)
		}
		synctest.Wait()
		if got := src.reads.Load(); got > maxSending {
			t.Errorf("%d streams' ReadFrom filled %d buffers while the connection took nothing, want at most %d", n, got, maxSending)
		}
	})
}

// stuckTransport is a connection whose peer's frames come from in, and
// that takes frames until stuck, then none.
type stuckTransport struct {
	in      chan []byte
	pending []byte
	stuck   atomic.Bool
	closed  chan struct{}
	once    sync.Once
}

func (c *stuckTransport) Read(p []byte) (int, error) {
	if len(c.pending) == 0 {
		select {
		case c.pending = <-c.in:
		case <-c.closed:
			return 0, io.EOF
		}
	}
	n := copy(p, c.pending)
	c.pending = c.pending[n:]
	return n, nil
}

func (c *stuckTransport) WriteFrame(_, _ []byte, _ time.Time) error {
	if c.stuck.Load() {
		<-c.closed
		return net.ErrClosed
	}
	return nil
}

func (c *stuckTransport) Close() error         { c.once.Do(func() { close(c.closed) }); return nil }
func (c *stuckTransport) LocalAddr() net.Addr  { return nil }
func (c *stuckTransport) RemoteAddr() net.Addr { return nil }
