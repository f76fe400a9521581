package hub

import (
	"sync"
	"time"
)

// admission paces agents' connections: at most a number welcomed in any
// one second, so a hub that restarts under a large fleet takes it back in
// waves, and no second carries much more than a twentieth of the fleet (the
// budget is a tenth: docs/decisions/008-performance.md). An agent over the
// pace is answered 503 with a Retry-After, which agents honour (SPEC
// section 1). Only welcomed agents count: connections that never get past
// their hello (a flood of bad handshakes) use up no one's place.
//
// The second is any second, not a clock second: counted in clock seconds,
// the end of one and the start of the next could together welcome twice
// the pace within a second (10.9 % of 10,000 agents in one second of a
// recorded reconnect storm).
type admission struct {
	mu     sync.Mutex // guards recent
	recent []int64    // when the agents welcomed in the last second were, oldest first (unix ns)
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
	a.forget(now)
	return len(a.recent) < rate
}

// welcomed counts an agent welcomed at now.
func (a *admission) welcomed(now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.forget(now)
	a.recent = append(a.recent, now.UnixNano())
}

// forget drops the welcomes a second or more before now. a.mu is held.
func (a *admission) forget(now time.Time) {
	cut := now.Add(-time.Second).UnixNano()
	i := 0
	for i < len(a.recent) && a.recent[i] <= cut {
		i++
	}
	if i == len(a.recent) {
		a.recent = a.recent[:0] // keep the array: the next wave reuses it
		return
	}
	a.recent = a.recent[i:]
}
