//go:build unix

package tunnel

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
)

// waitableSocket returns r's socket if r is a plain TCP connection, for
// lazyReader.readReady.
func waitableSocket(r io.Reader) syscall.RawConn {
	tc, ok := r.(*net.TCPConn)
	if !ok {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// readReady waits until the socket has bytes, with no buffer, then reads
// them into a borrowed buffer of waitBuffer bytes with one system call.
// Reading a frame's header first, as over TLS, took two or three for a
// frame of 1 KiB.
func (l *lazyReader) readReady() error {
	var n int
	var rerr error
	err := l.sock.Read(func(fd uintptr) bool {
		buf := getChunk(waitBuffer)
		for {
			n, rerr = syscall.Read(int(fd), *buf)
			if !errors.Is(rerr, syscall.EINTR) {
				break
			}
		}
		if errors.Is(rerr, syscall.EAGAIN) {
			putChunk(buf)
			return false // wait until readable
		}
		if rerr == nil && n > 0 {
			l.buf, l.pos, l.end = buf, 0, n
		} else {
			putChunk(buf)
		}
		return true
	})
	switch {
	case err != nil: // closed, or a deadline
		return err
	case rerr != nil:
		return os.NewSyscallError("read", rerr)
	case l.buf == nil:
		return io.EOF
	}
	return nil
}
