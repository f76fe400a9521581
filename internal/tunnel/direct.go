package tunnel

import (
	"errors"
	"io"
	"net"
	"syscall"
)

// WriteTo copies what the stream receives to w until the peer finishes or
// the stream fails, as io.Copy(w, st) would; io.Copy calls it.
//
// When w is a TCP or Unix socket, the session's read loop writes each data
// frame straight into the socket if nothing is queued ahead of it and the
// socket takes the bytes without waiting. Only what the socket can't take at
// once is handed to this goroutine, which writes it as Read's caller would.
// That saves a hand-off between goroutines per frame, and a copy: the
// agent's request bytes reach its API server from the read loop (decision
// 015). The read loop's write is non-blocking, so a slow socket never holds
// up the session's other streams.
func (st *stream) WriteTo(w io.Writer) (int64, error) {
	rc := rawConnOf(w)
	st.mu.Lock()
	st.sink = rc
	st.mu.Unlock()
	var written int64
	err := st.drainTo(w, &written)
	st.mu.Lock()
	st.sink = nil
	written += st.sunk
	st.sunk = 0
	st.mu.Unlock()
	return written, err
}

// drainTo writes what the read loop could not, until the stream ends.
func (st *stream) drainTo(w io.Writer, written *int64) error {
	for {
		st.mu.Lock()
		if len(st.chunks) == 0 {
			err := st.readErr()
			wait := st.readable
			if err != nil {
				st.passReadableLocked()
			}
			st.mu.Unlock()
			if err != nil {
				if errors.Is(err, io.EOF) {
					return nil
				}
				return err
			}
			select {
			case <-wait:
			case <-st.s.done:
			}
			continue
		}
		chunks, off := st.chunks, st.off
		st.draining = st.unreadLocked()
		st.chunks, st.off = nil, 0
		st.mu.Unlock()

		n, err := writeChunks(w, chunks, off)
		*written += int64(n)
		st.mu.Lock()
		st.draining = 0
		grant := st.consumedLocked(n)
		st.mu.Unlock()
		if err != nil {
			return err
		}
		if grant > 0 {
			// Queued, as Read's: the next chunks needn't wait behind
			// other streams' frames.
			st.s.queue(header{typ: typeWindow, stream: st.id, length: grant})
		}
	}
}

// writeChunks writes chunks to w, the first from off, and returns them to
// the pool, written or not.
func writeChunks(w io.Writer, chunks []*[]byte, off int) (int, error) {
	total := 0
	var err error
	for _, c := range chunks {
		if err == nil {
			var n int
			n, err = w.Write((*c)[off:])
			total += n
		}
		off = 0
		putChunk(c)
	}
	return total, err
}

// rawConnOf returns w's socket, when w is one that Go's poller runs
// non-blocking; nil otherwise.
func rawConnOf(w any) syscall.RawConn {
	var sc syscall.Conn
	switch c := w.(type) {
	case *net.TCPConn:
		sc = c
	case *net.UnixConn:
		sc = c
	default:
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}
