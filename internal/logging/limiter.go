package logging

import (
	"sync"
	"time"
)

// Limiter lets one event per key through per window, and counts what it
// held back, so per-connection noise can't flood the log. It also lets at
// most maxPerWindow events through per window across all keys: someone
// sending a new name or from a new address every time still gets only a
// few lines, and the next line that goes through says how many were held.
type Limiter struct {
	window       time.Duration
	maxPerWindow int
	now          func() time.Time

	mu          sync.Mutex // guards the following
	seen        map[string]*limited
	windowStart time.Time
	inWindow    int       // events let through since windowStart
	overflow    int       // events held back by the overall cap, not yet reported
	swept       time.Time // when stale keys were last dropped
}

type limited struct {
	at         time.Time
	suppressed int
}

// maxLimiterKeys bounds the Limiter's memory under a flood of distinct keys;
// past it, stale keys are dropped.
const maxLimiterKeys = 10000

func NewLimiter(window time.Duration) *Limiter {
	return &Limiter{window: window, maxPerWindow: 20, now: time.Now, seen: map[string]*limited{}}
}

// allow reports whether the event for key may be logged now and, if so, how
// many were held back since the last one (for its key, and by the overall
// cap).
func (l *Limiter) Allow(key string) (suppressed int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if now.Sub(l.windowStart) >= l.window {
		l.windowStart, l.inWindow = now, 0
	}
	e, found := l.seen[key]
	if found && now.Sub(e.at) < l.window {
		e.suppressed++
		return 0, false
	}
	if l.inWindow >= l.maxPerWindow {
		l.overflow++
		return 0, false
	}
	if !found {
		// Sweep at most once a window: a flood of new keys must not make
		// every refusal walk the whole map.
		if len(l.seen) >= maxLimiterKeys && now.Sub(l.swept) >= l.window {
			l.swept = now
			for k, e := range l.seen {
				if now.Sub(e.at) >= l.window {
					delete(l.seen, k)
				}
			}
		}
		if len(l.seen) >= maxLimiterKeys {
			l.overflow++
			return 0, false
		}
		e = &limited{}
		l.seen[key] = e
	}
	suppressed = e.suppressed + l.overflow
	e.at, e.suppressed = now, 0
	l.inWindow++
	l.overflow = 0
	return suppressed, true
}
