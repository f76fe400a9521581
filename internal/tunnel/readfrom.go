package tunnel

import "io"

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
func (st *stream) ReadFrom(r io.Reader) (int64, error) {
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
			return total, rerr
		}
	}
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
