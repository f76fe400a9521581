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
// buffer, then reads what came with one system call.
func readSome(rc syscall.RawConn, r io.Reader, most int) (*[]byte, int, error) {
	if rc == nil {
		return readBlocking(r, most)
	}
	var buf *[]byte
	var n int
	var rerr error
	err := rc.Read(func(fd uintptr) bool {
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
			return false // wait until readable
		}
		return true
	})
	if err == nil && rerr == nil && n > 0 {
		return buf, n, nil
	}
	if buf != nil {
		putChunk(buf)
	}
	switch {
	case err != nil: // closed, or a deadline
		return nil, 0, err
	case rerr != nil:
		return nil, 0, os.NewSyscallError("read", rerr)
	}
	return nil, 0, io.EOF
}
