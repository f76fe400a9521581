package hub

import (
	"sync"
	"time"

	"github.com/tetherhq/tether/internal/clock"
)

// timerLoop runs f after a first delay, then again after each delay f
// returns, until f says stop or Stop is called. Between runs no goroutine
// waits: each run gets one of its own from the clock's AfterFunc, for as long as f
// takes. An idle agent's heartbeat and probes cost the hub two timers, not
// two parked goroutines and their stacks (docs/decisions/008-performance.md).
type timerLoop struct {
	f func() (next time.Duration, again bool)

	running sync.WaitGroup // the run in progress, if any

	mu      sync.Mutex // guards the following
	t       clock.Timer
	stopped bool
}

func startTimerLoop(clk clock.Clock, first time.Duration, f func() (time.Duration, bool)) *timerLoop {
	l := &timerLoop{f: f}
	l.mu.Lock()
	l.t = clk.AfterFunc(first, l.run)
	l.mu.Unlock()
	return l
}

func (l *timerLoop) run() {
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		return
	}
	l.running.Add(1) // under mu, so never after Stop began to wait
	l.mu.Unlock()
	defer l.running.Done()
	next, again := l.f()
	if !again {
		return
	}
	l.mu.Lock()
	if !l.stopped {
		l.t.Reset(next)
	}
	l.mu.Unlock()
}

// Stop ends the loop and returns once a run in progress has returned. It
// may be called more than once.
func (l *timerLoop) Stop() {
	l.mu.Lock()
	l.stopped = true
	l.t.Stop()
	l.mu.Unlock()
	l.running.Wait()
}
