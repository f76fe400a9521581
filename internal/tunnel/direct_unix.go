//go:build unix

package tunnel

import (
	"errors"
	"syscall"
)

// writeNow writes what of p the socket takes without waiting, and returns
// how much that was. Any error, even a closed socket, just stops it: the
// rest goes to WriteTo's goroutine, whose own write reports the error.
func writeNow(rc syscall.RawConn, p []byte) int {
	n := 0
	rc.Write(func(fd uintptr) bool {
		for n < len(p) {
			k, err := syscall.Write(int(fd), p[n:])
			if k > 0 {
				n += k
			}
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			if err != nil || k <= 0 {
				break
			}
		}
		return true // never wait for the socket
	})
	return n
}
