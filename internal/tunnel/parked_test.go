package tunnel

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
	"time"
)

// parked counts the goroutines parked in state, as the runtime names it in
// a stack dump ("select", "IO wait", "chan receive"; "" for any), whose
// stacks hold every one of fns (a call, "pkg.f(", or who created them). A test that must act while a call waits (a
// Read on an empty stream, a Write behind a stalled frame, a read on an
// idle socket) waits for that call to be parked so, rather than sleep and
// hope it got there: parked is the state, and it names the call, so
// nothing else that waits in the same state is counted.
func parked(state string, fns ...string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for g := range bytes.SplitSeq(buf, []byte("\n\n")) {
		head, stack, _ := strings.Cut(string(g), "\n")
		// "goroutine 7 [select]:" or "goroutine 7 [IO wait, 2 minutes]:"
		_, st, ok := strings.Cut(head, " [")
		if !ok {
			continue
		}
		st, _, _ = strings.Cut(strings.TrimSuffix(st, "]:"), ",")
		if state != "" && st != state {
			continue
		}
		all := true
		for _, fn := range fns {
			if !strings.Contains(stack, fn) {
				all = false
				break
			}
		}
		if all {
			count++
		}
	}
	return count
}

// waitParked waits until n goroutines are parked in state in calls of fns
// (parked), for up to 10 s.
func waitParked(t *testing.T, n int, state string, fns ...string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := parked(state, fns...)
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d goroutines parked in %s in %s after 10 s", got, n, state, strings.Join(fns, " < "))
		}
		time.Sleep(time.Millisecond)
	}
}

// Calls that waitParked looks for.
const (
	inStreamRead   = "tunnel.(*stream).Read("
	inStreamWrite  = "tunnel.(*stream).Write("
	inLockWrite    = "tunnel.(*Session).lockWrite("
	inReadFrom     = "tunnel.(*stream).ReadFrom("
	inPollWait     = "internal/poll.runtime_pollWait("
	inWaitFrame    = "tunnel.(*lazyReader).waitFrame("
	inSessionClose = "tunnel.(*Session).Close("
	inCloseNotify  = "crypto/tls.(*Conn).closeNotify("
)
