package hub

import (
	"sync"
	"time"
)

// admission paces agents' connections: at most a number a second, so a
// hub that restarts under a large fleet takes it back in waves, and no
// second carries much more than a twentieth of the fleet (the budget is a
// tenth: docs/decisions/008-performance.md). An agent over the pace is
// answered 503 with a Retry-After, which agents honour (SPEC section 1).
//
// The pace counts the agents welcomed in the last second and those
// admitted and still on their way. Counting only the welcomed let a busy
// hub, whose handshakes took seconds, admit ever more in the meantime and
// then welcome twice or three times its pace in one second (decision 012).
// An agent that is not welcomed after all gives its place back, so a flood
// of bad handshakes holds places only while they last. The second is any
// second, not a clock second.
type admission struct {
	mu      sync.Mutex // guards the following
	recent  []int64    // when the agents welcomed in the last second were, oldest first (unix ns)
	pending int        // agents admitted and neither welcomed nor refused yet
}

// MinAdmitRate is the pace for a small fleet: a restart of a hub with a
// few hundred agents should not make any of them wait.
const MinAdmitRate = 100

// admitRate is the most agents admitted in one second, for a fleet of
// listed agents.
func admitRate(listed int) int { return max(MinAdmitRate, listed/20) }

// admitRate is this replica's pace: its share of the fleet's, so that
// the replicas left after one is killed take its agents back at the
// fleet's pace together, not once per replica.
func (h *Hub) admitRate() int {
	return admitRate(h.cfg.Agents.Len() / max(1, int(h.replicas.Load())))
}

// SetReplicas tells the hub how many replicas, itself included, share the
// fleet's agents (internal/peers, as replicas come and go).
func (h *Hub) SetReplicas(n int) { h.replicas.Store(int32(n)) }

// admit reports whether one more agent may connect at now; if it may, the
// caller must end its place with welcomed or giveBack.
func (a *admission) admit(now time.Time, rate int) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.forget(now)
	if len(a.recent)+a.pending >= rate {
		return false
	}
	a.pending++
	return true
}

// welcomed counts an admitted agent welcomed at now.
func (a *admission) welcomed(now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pending--
	a.forget(now)
	a.recent = append(a.recent, now.UnixNano())
}

// giveBack ends the place of an admitted agent that was not welcomed.
func (a *admission) giveBack() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pending--
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
