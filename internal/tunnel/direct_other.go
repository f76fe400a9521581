//go:build !unix

package tunnel

import "syscall"

// writeNow writes nothing where there is no non-blocking write to use:
// every frame goes through WriteTo's goroutine.
func writeNow(syscall.RawConn, []byte) int { return 0 }
