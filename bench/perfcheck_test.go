//go:build perfcheck

package main

import (
	"context"
	"os"
	"testing"
	"time"
)

// These tests are the short version of the bench that CI runs (`make
// perf-check`, without -race: the race detector slows the tunnel tenfold).
// Each checks every budgeted figure against a bound half as strict as its
// budget (figure.lenient), so a regression fails while the noise of a
// shared 2-core machine does not: a part whose check fails is measured once
// more, and each figure is judged by the better of its two measurements.

func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == "child" {
		os.Exit(runChild(os.Args[2], os.Args[3:]))
	}
	os.Exit(m.Run())
}

func TestPerfTunnel(t *testing.T) {
	checkPart(t, func(ctx context.Context, r *report, dir string) error {
		return benchTunnel(ctx, r, dir, tunnelOpts{rounds: 3, d: time.Second, rttBlocks: 3})
	})
}

func TestPerfIdleFleet(t *testing.T) {
	checkPart(t, func(ctx context.Context, r *report, dir string) error {
		return benchFleet(ctx, r, dir, fleetOpts{sizes: []int{300}, settle: 3 * time.Second})
	})
}

func TestPerfKubernetesPath(t *testing.T) {
	checkPart(t, func(ctx context.Context, r *report, dir string) error {
		return benchKube(ctx, r, dir, kubeOpts{gets: 300, blocks200: 2, lists: 4, agentRest: 2 * time.Second})
	})
}

func checkPart(t *testing.T, part func(context.Context, *report, string) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var first *report
	for attempt := 1; attempt <= 2; attempt++ {
		r := &report{}
		if err := part(ctx, r, t.TempDir()); err != nil {
			t.Fatal(err)
		}
		failed := 0
		for i, f := range r.Figures {
			bound, ok := f.lenient()
			if !ok && first != nil {
				if _, okBefore := first.Figures[i].lenient(); okBefore {
					ok = true
				}
			}
			if f.Pass == nil {
				continue
			}
			if ok {
				t.Logf("%s: %s %s (budget %s, CI bound %s)", f.Name, fmtValue(f.Value, f.Unit), f.Unit, f.Budget, fmtValue(bound, f.Unit))
				continue
			}
			failed++
			if attempt == 2 {
				t.Errorf("%s: %s %s twice; the budget is %s and CI allows %s (%s)", f.Name, fmtValue(f.Value, f.Unit), f.Unit, f.Budget, fmtValue(bound, f.Unit), f.Detail)
			}
		}
		if failed == 0 {
			return
		}
		if attempt == 1 {
			t.Logf("%d figures outside their CI bounds; measuring once more", failed)
			first = r
		}
	}
}
