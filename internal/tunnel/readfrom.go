package tunnel

import "io"

// frameRoom is what a data frame's buffer keeps in front of its body: the
// longest WebSocket header, then the frame's own.
const frameRoom = maxWSHeader + headerSize

// smallRead is what ReadFrom reads at first from a source that is no
// socket, and after a read that didn't fill its buffer: what it holds while
// such a source keeps it waiting. A TLS record fits.
const smallRead = 16<<10 + 64

// ReadFrom sends what r gives until r ends (io.EOF) or the stream fails, as
// io.Copy(st, r) would. Each read becomes one data frame of up to maxFrame
// bytes. It lands in a pooled buffer with room in front for the frame's
// headers, where a client masks it, so it is written with no copy.
//
// When r is a TCP or Unix socket, the buffer is taken only once the socket
// has bytes: a stream whose source is idle, such as a watch between events,
// holds none (decision 024). io.Copy(st, socket) doesn't get that far, as
// it calls the socket's WriteTo, which hands ReadFrom a wrapper: call
// ReadFrom directly. From any other reader, a read that waits holds a
// buffer of smallRead bytes, and one that follows a full read a frame's.
func (st *stream) ReadFrom(r io.Reader) (int64, error) {
	st.wlock.Lock()
	defer st.wlock.Unlock()
	rc := rawConnOf(r)
	var total int64
	size := smallRead
	for {
		win, err := st.reserve(maxFrame)
		if err != nil {
			return total, err
		}
		most := int(win)
		if rc == nil {
			most = min(most, size)
		}
		buf, n, rerr := readSome(rc, r, most)
		st.unreserve(win - uint32(n))
		if size = smallRead; n == most {
			size = maxFrame
		}
		if n > 0 {
			err = st.s.writeIn(header{typ: typeData, stream: st.id, length: uint32(n)}, (*buf)[:frameRoom+n])
			if err == nil {
				total += int64(n)
			}
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

// readBlocking reads up to most bytes of r into a pooled buffer, behind
// frameRoom bytes of room. The buffer is nil when nothing came.
func readBlocking(r io.Reader, most int) (*[]byte, int, error) {
	buf := getChunk(frameRoom + most)
	n, err := r.Read((*buf)[frameRoom:])
	if n <= 0 {
		putChunk(buf)
		return nil, 0, err
	}
	return buf, n, err
}
