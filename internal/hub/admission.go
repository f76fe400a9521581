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
//
// Agents held back are told to come back in the order they came, at the
// pace: the first pace's worth in a second, the next in two, and so on
// (tail), not each at a random second of the reconnect spread. At random,
// the seconds after a wave saw fewer agents than the pace takes while others
// still waited, and one held back twice waited twice: a replica's 2,000
// agents, killed, took 21 s to come back at a pace that takes them in 10
// (docs/decisions/043-held-back-agents-come-back-in-order.md).
type admission struct {
	mu      sync.Mutex // guards the following
	recent  []int64    // when the agents welcomed in the last second were, oldest first (unix ns)
	pending int        // agents admitted and neither welcomed nor refused yet
	tail    time.Time  // when the last agent held back was told to come back
}

// paceSeconds is how long the pace takes a whole agents list in: it
// admits a paceSeconds-th of the list a second.
const paceSeconds = 20

// maxHoldBack bounds the wait of an agent held back: the time the pace
// takes the whole agents list in, so however many arrive, held back again
// or hammering, none waits longer than the whole fleet's return.
const maxHoldBack = paceSeconds * time.Second

// MinAdmitRate is the pace for a small fleet: a restart of a hub with a
// few hundred agents should not make any of them wait.
const MinAdmitRate = 100

// admitRate is the most agents admitted in one second, for a fleet of
// listed agents.
func admitRate(listed int) int { return max(MinAdmitRate, listed/paceSeconds) }

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
// caller must end its place with welcomed or giveBack. If it may not, wait
// is when it should come back: behind the agents held back before it, a
// rate-th of a second each.
func (a *admission) admit(now time.Time, rate int) (ok bool, wait time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.forget(now)
	if len(a.recent)+a.pending < rate {
		a.pending++
		return true, 0
	}
	if a.tail.Before(now) {
		a.tail = now
	}
	a.tail = a.tail.Add(time.Second / time.Duration(rate))
	if last := now.Add(maxHoldBack); a.tail.After(last) {
		a.tail = last
	}
	return false, a.tail.Sub(now)
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
