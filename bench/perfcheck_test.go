//go:build perfcheck

package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// These tests are the short version of the bench that CI runs (`make
// perf-check`, without -race: the race detector slows the tunnel tenfold).
// Each checks every budgeted figure against a bound half as strict as its
// budget (figure.lenient), or, where the budget is not met yet, against a
// guard at today's level (guards), so a regression fails while the noise of
// a shared 2-core machine does not: a part whose check fails is measured
// once more, and each figure is judged by the better of its two
// measurements.

func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == "child" {
		os.Exit(runChild(os.Args[2], os.Args[3:]))
	}
	goleak.VerifyTestMain(m)
}

func TestPerfTunnel(t *testing.T) {
	checkPart(t, func(ctx context.Context, r *report, dir string) error {
		return benchTunnel(ctx, r, dir, tunnelOpts{rounds: 3, d: 700 * time.Millisecond, rttBlocks: 5})
	})
}

func TestPerfIdleFleet(t *testing.T) {
	checkPart(t, func(ctx context.Context, r *report, dir string) error {
		return benchFleet(ctx, r, dir, fleetOpts{sizes: []int{300}, settle: 3 * time.Second})
	})
}

// TestPerfKubernetesPath also sends 300 small GETs over HTTP/2, as kubectl
// does (h2Gets, about 3 s): their p50 and p99 are guarded at today's level
// (guards), as their budget is not met yet.
func TestPerfKubernetesPath(t *testing.T) {
	checkPart(t, func(ctx context.Context, r *report, dir string) error {
		return benchKube(ctx, r, dir, kubeOpts{gets: 200, blocks200: 3, lists: 4, h2Gets: 300, agentRest: time.Second})
	})
}

// TestPerfProbes holds a probe that reaches its API server to well under
// what a TLS handshake per probe cost the hub (1.4 ms, decision 019): a
// probe on a kept connection cost 60 µs in the full bench.
func TestPerfProbes(t *testing.T) {
	const bound = 600 // µs
	var got []float64
	for attempt := 1; attempt <= 2; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		r := &report{}
		err := benchProbes(ctx, r, t.TempDir(), 500, 12*time.Second, 10*time.Second)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range r.Figures {
			if strings.HasPrefix(f.Name, "hub CPU per probe") {
				got = append(got, f.Value)
				t.Logf("%s: %.0f µs (CI bound %d µs; %s)", f.Name, f.Value, bound, f.Detail)
				if f.Value <= bound {
					return
				}
			}
		}
	}
	t.Errorf("hub CPU per probe that reaches its API server: %v µs, over %d µs twice", got, bound)
}

// guards are the CI bounds of the figures that miss even the lenient bound
// on this machine today (docs/PERFORMANCE.md, docs/decisions/008 and 010):
// for them CI guards today's level with room for the machine's noise, about
// 1.5 times the worst of the runs on 2026-11-29, so a regression still
// fails while the budget is not yet met. Each is found by a part of the
// figure's name; remove an entry once its figure meets the lenient bound.
// The tunnel's throughput, and the idle agent's heap, stacks and RSS on
// the hub, met theirs with the multiplexer of decision 010 and are held to
// them.
var guards = []struct {
	name  string
	bound float64
	// margin, for a figure measured against a floor of the same run
	// (atMostPlus): the bound is that floor + margin, not bound.
	margin float64
}{
	// The echo's budget is the copying relay's added + 30 µs; the tunnel
	// sits 60–90 µs over the relay (decision 017's history: each direction
	// hands the data from the read loop to the stream's reader), so the
	// lenient + 60 µs fails whenever the relay has a fast run.
	{name: "1 KiB echo round trip, p50", margin: 130},
	{name: "small GET, 1 in flight, p50", bound: 2.5}, // lenient: the relays' added + 0.6 ms; measured 0.70–1.4 ms
	{name: "small GET, 1 in flight, p99", bound: 3.0}, // lenient: the relays' ratio × 1.3; measured 0.57–1.77×, once over 2.5 in CI
	{name: "21 MB list, gzip", bound: 2.7},            // lenient: the relays' ratio × 1.2; measured 0.65–1.81×
	{name: "21 MB list, no gzip", bound: 3.5},         // lenient: the relays' ratio × 1.2; measured 1.44–2.34×
	// HTTP/2, kubectl's path: the budget is not met yet on this machine
	// (p50 added 0.55–0.97 ms against the relays' +0.22–0.25 ms + 0.30).
	{name: "small GET over HTTP/2, one at a time, p50", bound: 2.0},
	{name: "small GET over HTTP/2, one at a time, p99", bound: 2.5},
	// Hub replicas (issue 35), measured 2026-12-03 under a load average of
	// 1 to 6. A request forwarded on the peer link: p50 added 0.38–0.71 ms
	// against the budget's 0.25 (lenient 0.5). (The 21 MB list without gzip
	// through the forwarding replica, 0.29–0.33× the holder's throughput
	// while the peer link asked for gzip, is 0.94× since, and held to the
	// lenient bound.)
	{name: "p50, forwarding replica − holder", bound: 1.1},
	// 300 agents: each replica admits at least 100 a second (hub.MinAdmitRate),
	// so the killed replica's 100 all come back within one second, a third
	// of the fleet; the budget's tenth holds from 2,000 agents a replica.
	{name: "largest share of the fleet reconnecting", bound: 0.34},
}

// ciBound is the bound CI holds f to, and whether f is within it.
func ciBound(f figure) (bound float64, ok bool, guarded bool) {
	for _, g := range guards {
		if strings.Contains(f.Name, g.name) {
			if g.margin != 0 {
				b := f.floor + g.margin
				return b, f.Value <= b, true
			}
			if f.atLeast {
				return g.bound, f.Value >= g.bound, true
			}
			return g.bound, f.Value <= g.bound, true
		}
	}
	bound, ok = f.lenient()
	return bound, ok, false
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
			bound, ok, guarded := ciBound(f)
			if !ok && first != nil && i < len(first.Figures) {
				if _, okBefore, _ := ciBound(first.Figures[i]); okBefore {
					ok = true
				}
			}
			kind := "half as strict as the budget"
			if guarded {
				kind = "a guard at today's level: the budget is not met yet"
			}
			if f.Pass == nil {
				continue
			}
			if ok {
				t.Logf("%s: %s %s (budget %s, CI bound %s, %s)", f.Name, fmtValue(f.Value, f.Unit), f.Unit, f.Budget, fmtValue(bound, f.Unit), kind)
				continue
			}
			failed++
			if attempt == 1 {
				t.Logf("%s: %s %s, outside its CI bound %s, %s", f.Name, fmtValue(f.Value, f.Unit), f.Unit, fmtValue(bound, f.Unit), kind)
			}
			if attempt == 2 {
				t.Errorf("%s: %s %s twice; the budget is %s and CI allows %s, %s (%s)", f.Name, fmtValue(f.Value, f.Unit), f.Unit, f.Budget, fmtValue(bound, f.Unit), kind, f.Detail)
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

// TestPerfFlood floods one hub and one agent (issue 33, item 2): 400 slow
// readers of an 11 MB list, then 1,000 idle watches, from twenty people, while
// another person's small GETs are timed. The hub must stay under 40 % of
// the chart's memory limit (1Gi), the agent under 100 MiB, the other
// person's p50 within 1.5× of what it was before the flood, and the
// cluster Ready. Every flooding request is let through (the watches with
// TETHER_MAX_STREAMS_PER_AGENT raised for them): what is measured is what
// each open request costs, not the bound on how many. As the other checks
// here, a case whose p50 misses is measured once more.
func TestPerfFlood(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    floodOpts
	}{
		{"slow readers", floodOpts{people: 20, slow: 400, listBytes: 11 << 20, gets: 200}},
		{"idle watches", floodOpts{people: 20, watches: 1000, gets: 200, hubEnv: []string{"TETHER_MAX_STREAMS_PER_AGENT=1100"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for attempt := 1; attempt <= 2; attempt++ {
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
				dir := t.TempDir()
				if d := os.Getenv("BENCH_FLOOD_DIR"); d != "" {
					// For a look at the hub's heap profile after the run.
					dir = filepath.Join(d, strings.ReplaceAll(tc.name, " ", "-"))
					os.MkdirAll(dir, 0o755)
				}
				res, err := benchFlood(ctx, dir, tc.o)
				cancel()
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%s", res)
				if want := tc.o.slow + tc.o.watches; res.statuses[200] != want {
					t.Errorf("%d of %d flooding requests answered 200: %v", res.statuses[200], want, res.statuses)
				}
				if res.hubRSSPeak > 0.4*1024 {
					t.Errorf("hub RSS %.0f MiB, over 40 %% of its 1Gi limit", res.hubRSSPeak)
				}
				if res.agentRSSPeak > 100 {
					t.Errorf("agent RSS %.0f MiB, over 100 MiB", res.agentRSSPeak)
				}
				if !res.ready {
					t.Errorf("the cluster isn't Ready during the flood")
				}
				if res.getP50During <= 1.5*res.getP50Before {
					return
				}
				if attempt == 2 {
					t.Errorf("the other person's GET p50 went from %.2f to %.2f ms, more than 1.5×, twice", res.getP50Before, res.getP50During)
				}
			}
		})
	}
}
