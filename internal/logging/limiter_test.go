package logging

import (
	"fmt"
	"testing"
	"time"
)

func TestLimiter(t *testing.T) {
	type step struct {
		after      time.Duration // since the start
		key        string
		ok         bool
		suppressed int
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"one per key per window", []step{
			{0, "a", true, 0}, {time.Second, "a", false, 0}, {2 * time.Second, "b", true, 0},
			{9 * time.Second, "a", false, 0}, {10 * time.Second, "a", true, 2},
		}},
		{"the overall cap holds back new keys and reports them", func() []step {
			var s []step
			for i := range 20 {
				s = append(s, step{0, fmt.Sprint(i), true, 0})
			}
			s = append(s, step{time.Second, "x", false, 0}, step{time.Second, "y", false, 0})
			// The next window: x goes through and reports the two held
			// back by the cap.
			return append(s, step{10 * time.Second, "x", true, 2}, step{10 * time.Second, "z", true, 0})
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Unix(1_000_000, 0)
			var now time.Time
			l := NewLimiter(10 * time.Second)
			l.now = func() time.Time { return now }
			for i, s := range tt.steps {
				now = start.Add(s.after)
				suppressed, ok := l.Allow(s.key)
				if ok != s.ok || suppressed != s.suppressed {
					t.Fatalf("step %d (%q at %s): ok=%v suppressed=%d, want %v %d", i, s.key, s.after, ok, suppressed, s.ok, s.suppressed)
				}
			}
		})
	}
}

func TestLimiterBoundsKeys(t *testing.T) {
	l := NewLimiter(time.Minute)
	l.maxPerWindow = 1 << 30
	for i := range 3 * maxLimiterKeys {
		l.Allow(fmt.Sprint(i))
	}
	if n := len(l.seen); n > maxLimiterKeys {
		t.Fatalf("%d keys kept, want at most %d", n, maxLimiterKeys)
	}
}
