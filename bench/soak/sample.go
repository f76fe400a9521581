package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"time"
)

// sample is the process's state at one moment.
type sample struct {
	at         time.Duration
	goroutines int
	heap       float64 // bytes of heap in use after a GC
	fds        int
}

func take(at time.Duration) sample {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fds := -1
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		fds = len(ents)
	}
	return sample{at: at, goroutines: runtime.NumGoroutine(), heap: float64(ms.HeapInuse), fds: fds}
}

// slope fits y = a + b·x by least squares and returns b and the mean of y.
func slope(xs, ys []float64) (b, mean float64) {
	n := float64(len(xs))
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
		sxx += xs[i] * xs[i]
		sxy += xs[i] * ys[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0, sy / n
	}
	return (n*sxy - sx*sy) / d, sy / n
}

// verdict fits a line to each series after the warm-up and fails when, over
// the fitted span, it rises by more than 10 % of its mean plus a small
// allowance (for goroutines and fds, the churn's own momentary spread).
func verdict(out io.Writer, samples []sample, warmup time.Duration) error {
	var kept []sample
	for _, s := range samples {
		if s.at >= warmup {
			kept = append(kept, s)
		}
	}
	if len(kept) < 5 {
		return fmt.Errorf("only %d samples after the %s warm-up: run longer", len(kept), warmup)
	}
	xs := make([]float64, len(kept))
	for i, s := range kept {
		xs[i] = s.at.Hours()
	}
	span := xs[len(xs)-1] - xs[0]
	series := []struct {
		name, unit string
		scale      float64
		allowance  float64
		get        func(sample) float64
	}{
		{"goroutines", "", 1, 20, func(s sample) float64 { return float64(s.goroutines) }},
		{"heap", "MiB", 1 << 20, 1 << 20, func(s sample) float64 { return s.heap }},
		{"fds", "", 1, 10, func(s sample) float64 { return float64(s.fds) }},
	}
	var failed []string
	for _, se := range series {
		ys := make([]float64, len(kept))
		for i, s := range kept {
			ys[i] = se.get(s)
		}
		b, mean := slope(xs, ys)
		rise := b * span
		limit := 0.10*mean + se.allowance
		ok := rise <= limit
		fmt.Fprintf(out, "%-10s mean %.1f%s, slope %+.2f%s/h, rise over the fit %+.2f%s (limit %.2f%s) %s\n",
			se.name, mean/se.scale, se.unit, b/se.scale, se.unit, rise/se.scale, se.unit, limit/se.scale, se.unit, map[bool]string{true: "flat", false: "RISING"}[ok])
		if !ok {
			failed = append(failed, se.name)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("not flat: %v", failed)
	}
	return nil
}
