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
// between events, holds none (decision 024). io.Copy(st, socket) doesn't
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
		buf, n, rerr := readSome(rc, r, most)
		var err error
		if n > 0 {
			var k int
			k, err = st.Write((*buf)[:n])
			total += int64(k)
		}
		if buf != nil {
			putChunk(buf)
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

// readBlocking reads up to most bytes of r into a pooled buffer, which is
// nil when nothing came.
func readBlocking(r io.Reader, most int) (*[]byte, int, error) {
	buf := getChunk(most)
	n, err := r.Read(*buf)
	if n <= 0 {
		putChunk(buf)
		return nil, 0, err
	}
	return buf, n, err
}
