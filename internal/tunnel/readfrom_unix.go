//go:build unix

package tunnel

import (
	"errors"
	"io"
	"os"
	"syscall"
)

// readSome reads up to most bytes of r into a pooled buffer, which is nil
// when nothing came. When r is a socket (rc), it waits for bytes holding no
// buffer, then reads what came with one system call. With a gate, it holds
// a place in it for as long as it holds a buffer: it returns holding one
// exactly when the buffer is not nil.
func readSome(rc syscall.RawConn, r io.Reader, most int, g *gate) (*[]byte, int, error) {
	if rc == nil {
		return gatedReadBlocking(r, most, g)
	}
	var buf *[]byte
	var n int
	var rerr, gerr error
	err := rc.Read(func(fd uintptr) bool {
		if gerr = g.enter(); gerr != nil {
			return true
		}
		buf = getChunk(most)
		for {
			n, rerr = syscall.Read(int(fd), *buf)
			if !errors.Is(rerr, syscall.EINTR) {
				break
			}
		}
		if errors.Is(rerr, syscall.EAGAIN) {
			putChunk(buf)
			buf = nil
			g.leave()
			return false // wait until readable
		}
		return true
	})
	if gerr != nil {
		return nil, 0, gerr
	}
	if err == nil && rerr == nil && n > 0 {
		return buf, n, nil
	}
	if buf != nil {
		putChunk(buf)
		g.leave()
	}
	switch {
	case err != nil: // closed, or a deadline
		return nil, 0, err
	case rerr != nil:
		return nil, 0, os.NewSyscallError("read", rerr)
	}
	return nil, 0, io.EOF
}
