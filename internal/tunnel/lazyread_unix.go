//go:build unix

package tunnel

import (
	"io"
	"net"
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
	buf, n, err := readSome(l.sock, l.r, waitBuffer, nil)
	if buf != nil {
		l.buf, l.pos, l.end = buf, 0, n
	}
	return err
}
