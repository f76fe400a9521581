package hub

import (
	"sync"
	"time"
)

// admission paces agents' connections: at most a number welcomed a second,
// so a hub that restarts under a large fleet takes it back in waves, and no
// second carries much more than a twentieth of the fleet (the budget is a
// tenth: docs/decisions/008-performance.md). An agent over the pace is
// answered 503 with a Retry-After, which agents honour (SPEC section 1).
// Only welcomed agents count: connections that never get past their hello
// (a flood of bad handshakes) use up no one's place.
type admission struct {
	mu     sync.Mutex // guards the following
	second int64      // the unix second being counted
	n      int        // agents welcomed in it
}

// minAdmitRate is the pace for a small fleet: a restart of a hub with a
// few hundred agents should not make any of them wait.
const minAdmitRate = 100

// admitRate is the most agents welcomed in one second, for a fleet of
// listed agents.
func admitRate(listed int) int { return max(minAdmitRate, listed/20) }

// allow reports whether one more agent may connect at now. Agents that
// connect at once may all be allowed: the second fills as they are welcomed.
func (a *admission) allow(now time.Time, rate int) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s := now.Unix(); s != a.second {
		a.second, a.n = s, 0
	}
	return a.n < rate
}

// welcomed counts an agent welcomed at now.
func (a *admission) welcomed(now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s := now.Unix(); s != a.second {
		a.second, a.n = s, 0
	}
	a.n++
}
