//go:build !unix

package tunnel

import (
	"io"
	"syscall"
)

// waitableSocket returns nil: lazyReader reads frames' first bytes
// straight off the connection here.
func waitableSocket(io.Reader) syscall.RawConn { return nil }

func (l *lazyReader) readReady() error { return nil }
