// Package clock is time as the hub keeps it: the real one, or a fake that
// a test moves on by hand, so that tests of heartbeats and probes wait for
// a state, not for the machine's time to pass.
package clock

import (
	"sort"
	"sync"
	"time"
)

// Clock tells the time and runs functions later.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed, as
	// time.AfterFunc does.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a call AfterFunc has planned: *time.Timer's Stop and Reset.
type Timer interface {
	Stop() bool
	Reset(d time.Duration) bool
}

// Real is the machine's clock.
func Real() Clock { return real{} }

type real struct{}

func (real) Now() time.Time                            { return time.Now() }
func (real) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// Fake is a Clock that stands still until Step moves it. The functions its
// timers call run in goroutines of their own, as with the real clock, never
// under its lock: they may tell the time and reset their timers.
type Fake struct {
	mu     sync.Mutex // guards the following
	now    time.Time
	timers map[*fakeTimer]struct{} // planned, not yet called or stopped
}

// NewFake returns a Fake that says it is now.
func NewFake(now time.Time) *Fake {
	return &Fake{now: now, timers: map[*fakeTimer]struct{}{}}
}

func (c *Fake) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *Fake) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, f: f, at: c.now.Add(d)}
	c.timers[t] = struct{}{}
	return t
}

// Step moves the clock on by d and starts, in time order, the functions of
// the timers due by then.
func (c *Fake) Step(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*fakeTimer
	for t := range c.timers {
		if !t.at.After(c.now) {
			due = append(due, t)
			delete(c.timers, t)
		}
	}
	c.mu.Unlock()
	sort.Slice(due, func(i, j int) bool { return due[i].at.Before(due[j].at) })
	for _, t := range due {
		go t.f()
	}
}

// Timers counts the timers planned and not yet due or stopped.
func (c *Fake) Timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// Next is how long until the next timer is due, and false when none is
// planned.
func (c *Fake) Next() (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var next time.Duration
	found := false
	for t := range c.timers {
		if d := t.at.Sub(c.now); !found || d < next {
			next, found = d, true
		}
	}
	return next, found
}

type fakeTimer struct {
	c  *Fake
	f  func()
	at time.Time // guarded by c.mu
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	_, planned := t.c.timers[t]
	delete(t.c.timers, t)
	return planned
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	_, planned := t.c.timers[t]
	t.at = t.c.now.Add(d)
	t.c.timers[t] = struct{}{}
	return planned
}
