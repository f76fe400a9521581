//go:build !unix

package tunnel

import (
	"io"
	"syscall"
)

// readSome reads up to most bytes of r into a pooled buffer, which is nil
// when nothing came; it holds a place in g while it holds the buffer.
func readSome(_ syscall.RawConn, r io.Reader, most int, g *gate) (*[]byte, int, error) {
	return gatedReadBlocking(r, most, g)
}
