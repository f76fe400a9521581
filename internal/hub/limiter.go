package hub

import (
	"sync"
	"time"
)

// limiter lets one event per key through per window, and counts what it
// held back, so per-connection noise can't flood the log.
type limiter struct {
	window time.Duration
	now    func() time.Time

	mu   sync.Mutex // guards the following
	seen map[string]*limited
}

type limited struct {
	at         time.Time
	suppressed int
}

// maxLimiterKeys bounds the limiter's memory under a flood of distinct keys;
// past it, stale keys are dropped.
const maxLimiterKeys = 10000

func newLimiter(window time.Duration) *limiter {
	return &limiter{window: window, now: time.Now, seen: map[string]*limited{}}
}

// allow reports whether the event for key may be logged now and, if so, how
// many were held back since the last one.
func (l *limiter) allow(key string) (suppressed int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if e, found := l.seen[key]; found {
		if now.Sub(e.at) < l.window {
			e.suppressed++
			return 0, false
		}
		suppressed = e.suppressed
		e.at, e.suppressed = now, 0
		return suppressed, true
	}
	if len(l.seen) >= maxLimiterKeys {
		for k, e := range l.seen {
			if now.Sub(e.at) >= l.window {
				delete(l.seen, k)
			}
		}
		if len(l.seen) >= maxLimiterKeys {
			return 0, false
		}
	}
	l.seen[key] = &limited{at: now}
	return 0, true
}
