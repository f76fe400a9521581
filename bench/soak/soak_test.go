package main

import (
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestVerdict: flat series pass, whatever their noise; one that keeps
// rising fails, named; too few samples after the warm-up fail.
func TestVerdict(t *testing.T) {
	series := func(n int, f func(i int) sample) []sample {
		var out []sample
		for i := range n {
			s := f(i)
			s.at = time.Duration(i) * 10 * time.Second
			out = append(out, s)
		}
		return out
	}
	noise := func(i int) int { return []int{0, 7, -5, 12, -9, 3}[i%6] }
	flat := series(60, func(i int) sample {
		return sample{goroutines: 400 + noise(i), heap: float64(50<<20 + noise(i)<<16), fds: 60 + noise(i)/2}
	})
	if err := verdict(io.Discard, flat, time.Minute); err != nil {
		t.Errorf("flat: %v", err)
	}
	for _, c := range []struct {
		name string
		leak func(*sample, int)
	}{
		{"goroutines", func(s *sample, i int) { s.goroutines += 2 * i }},
		{"heap", func(s *sample, i int) { s.heap += float64(i << 18) }},
		{"fds", func(s *sample, i int) { s.fds += i / 2 }},
	} {
		leaking := series(60, func(i int) sample {
			s := flat[i]
			c.leak(&s, i)
			return s
		})
		if err := verdict(io.Discard, leaking, time.Minute); err == nil || err.Error() != "not flat: ["+c.name+"]" {
			t.Errorf("%s leaking: %v, want not flat: [%s]", c.name, err, c.name)
		}
	}
	if err := verdict(io.Discard, flat[:8], time.Minute); err == nil || !strings.Contains(err.Error(), "run longer") {
		t.Errorf("two samples after the warm-up: %v", err)
	}
}

// TestSoakRuns: a short soak runs its whole load, agents leaving and coming
// back, requests and watches, stops everything it started, and passes.
func TestSoakRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for several seconds")
	}
	var out strings.Builder
	err := run(t.Context(), settings{
		duration: 12 * time.Second, sample: 250 * time.Millisecond, warmup: 2 * time.Second,
		clusters: 3, requesters: 2, watchers: 2, agentLife: time.Second,
	}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log(out.String())
	m := regexp.MustCompile(`ran \S+: (\d+) agent connects, (\d+) requests \((\d+) failed\), (\d+) watches`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no summary line:\n%s", out.String())
	}
	n := func(i int) int { v, _ := strconv.Atoi(m[i]); return v }
	if n(1) <= 3 || n(2) == 0 || n(4) == 0 {
		t.Errorf("the load didn't run: %d agent connects (want more than the 3 clusters: they come back), %d requests, %d watches\n%s",
			n(1), n(2), n(4), out.String())
	}
}
