package tunnel

import (
	"io"
	"net"
	"time"
)

// ReadFrom sends what r gives until r ends (io.EOF) or the stream fails, as
// io.Copy(st, r) would, each read written as Write writes it.
//
// When r is a TCP or Unix socket, each read is of up to maxFrame bytes,
// into a buffer taken from a pool only once the socket has bytes, and given
// back once they are sent: a stream whose source is idle, such as a watch
// between events, holds none (decision 024). Nor does one out of window: r
// is read only once the window lets the stream send, and no more than it
// lets, and the session's gate bounds the buffers filled and waiting for
// the connection. io.Copy(st, socket) doesn't
// get that far, as it calls the socket's WriteTo, which hands ReadFrom a
// wrapper: call ReadFrom directly. Any other reader is read as io.Copy
// reads it, 32 KiB at a time, the buffer held while a read waits.
//
// The stream's end, by Close, a reset or the session's end, ends ReadFrom
// too, with the stream's error, even while r has nothing to say: when r
// takes read deadlines (a net.Conn), the end puts its deadline in the past,
// and leaves it there. Otherwise a relay whose peer had half-closed would
// wait for as long as r stays open and silent.
func (st *stream) ReadFrom(r io.Reader) (int64, error) {
	if d, ok := r.(readDeadliner); ok {
		st.watchSource(d)
		defer st.watchSource(nil)
	}
	rc := rawConnOf(r)
	most := maxFrame
	if rc == nil {
		most = 32 << 10
	}
	var total int64
	for {
		// Read only once the window lets it go on, and no more than it
		// lets: a stream whose reader at the other end is behind holds
		// no buffer here, and what its source has to say waits in the
		// source (a socket's kernel buffer, then its sender).
		if _, err := st.awaitWindow(); err != nil {
			return total, err
		}
		buf, n, rerr := readSome(rc, r, min(most, max(st.sendable(), 1)), st.s.sending)
		var err error
		if n > 0 {
			var k int
			k, err = st.Write((*buf)[:n])
			total += int64(k)
		}
		if buf != nil {
			putChunk(buf)
			st.s.sending.leave()
		}
		switch {
		case err != nil:
			return total, err
		case rerr == io.EOF:
			return total, nil
		case rerr != nil:
			if err := st.endErr(); err != nil {
				return total, err // the stream's end woke the read
			}
			return total, rerr
		}
	}
}

// readDeadliner is a source whose waiting read a deadline ends.
type readDeadliner interface{ SetReadDeadline(time.Time) error }

// watchSource makes d the source the stream's end wakes, or none.
func (st *stream) watchSource(d readDeadliner) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.source = d
	if st.closed || st.reset || st.sessionEnded() {
		st.wakeSourceLocked()
	}
}

// wakeSourceLocked ends the wait of a read of the source, if any. st.mu is
// held.
func (st *stream) wakeSourceLocked() {
	if st.source != nil {
		st.source.SetReadDeadline(time.Unix(1, 0))
	}
}

// endErr is why the stream is over, or nil while it isn't.
func (st *stream) endErr() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	switch {
	case st.closed:
		return net.ErrClosed
	case st.reset:
		return ErrStreamReset
	case st.sessionEnded():
		return st.s.ended()
	}
	return nil
}

// gatedReadBlocking reads up to most bytes of r into a pooled buffer, which
// is nil when nothing came, holding a place in g while it holds the buffer.
func gatedReadBlocking(r io.Reader, most int, g *gate) (*[]byte, int, error) {
	if err := g.enter(); err != nil {
		return nil, 0, err
	}
	buf := getChunk(most)
	n, err := r.Read(*buf)
	if n <= 0 {
		putChunk(buf)
		g.leave()
		return nil, 0, err
	}
	return buf, n, err
}

// gate bounds how many of a session's ReadFrom buffers are filled and not
// yet sent: every stream whose source has bytes reads them into a buffer of
// up to maxFrame, then waits for the session's write lock. Without a bound,
// 400 streams given their windows at once held 400 such buffers on the
// agent, 100 MiB, while the connection wrote them one by one. A nil gate
// lets all through.
type gate struct {
	places chan struct{}
	done   <-chan struct{}
	ended  func() error
}

func newGate(n int, done <-chan struct{}, ended func() error) *gate {
	return &gate{places: make(chan struct{}, n), done: done, ended: ended}
}

// enter waits for a place, or for the session's end.
func (g *gate) enter() error {
	if g == nil {
		return nil
	}
	select {
	case g.places <- struct{}{}:
		return nil
	case <-g.done:
		return g.ended()
	}
}

func (g *gate) leave() {
	if g != nil {
		<-g.places
	}
}
