//go:build !unix

package tunnel

import (
	"io"
	"syscall"
)

// readSome reads up to most bytes of r into a pooled buffer, which is nil
// when nothing came.
func readSome(_ syscall.RawConn, r io.Reader, most int) (*[]byte, int, error) {
	return readBlocking(r, most)
}
