// Command wschoice measures the two candidate WebSocket libraries for
// Tether's agent tunnel, with yamux on top, against direct loopback TCP:
// bulk throughput (1 and 32 streams, both directions) and the hub-side
// memory of idle agent connections. The results back
// docs/decisions/001-websocket-and-multiplexer.md.
//
// Usage, from this directory:
//
//	go run .                 # full run, prints markdown tables
//	go run . -reps 1 -dur 1s # quick look
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
)

const mib = 1 << 20

func main() {
	role := flag.String("role", "", "internal: memserver or memclients (used when the binary runs itself)")
	lib := flag.String("lib", "", "internal: transport name for -role")
	n := flag.Int("n", 2000, "idle connections for the memory test")
	addr := flag.String("addr", "", "internal: hub address for -role=memclients")
	reps := flag.Int("reps", 5, "repetitions of every case; medians are reported")
	dur := flag.Duration("dur", 2*time.Second, "measured time per throughput case")
	warmup := flag.Duration("warmup", 500*time.Millisecond, "unmeasured time before each throughput case")
	skipTput := flag.Bool("skip-throughput", false, "skip the throughput cases")
	skipMem := flag.Bool("skip-memory", false, "skip the idle-connection memory cases")
	flag.Parse()

	trs := transports()
	var err error
	switch *role {
	case "":
		err = orchestrate(trs, *n, *reps, *warmup, *dur, !*skipTput, !*skipMem)
	case "memserver", "memclients":
		tr, ok := trs[*lib]
		if !ok {
			err = fmt.Errorf("unknown -lib %q: want one of %s", *lib, strings.Join(memLibs, ", "))
			break
		}
		if *role == "memserver" {
			err = runMemServer(tr, *lib, *n)
		} else {
			err = runMemClients(tr, *n, *addr)
		}
	default:
		err = fmt.Errorf("unknown -role %q: want memserver or memclients, or none", *role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "wschoice:", err)
		os.Exit(1)
	}
}

// transports names every WebSocket setup under test. A pool is shared by
// all conns of one setup, as gorilla asks for one pool per buffer size.
func transports() map[string]transport {
	b64k := gorillaBufs{read: 64 << 10, write: 64 << 10}
	pooled := b64k
	pooled.pool = &sync.Pool{}
	return map[string]transport{
		"coder":              coderTransport{},
		"gorilla":            gorillaTransport{},
		"gorilla-agent64k":   gorillaTransport{agent: b64k},
		"gorilla-64k":        gorillaTransport{hub: pooled, agent: b64k},
		"gorilla-64k-nopool": gorillaTransport{hub: b64k, agent: b64k},
	}
}

// memLibs are the setups whose hub side differs; gorilla-agent64k has the
// same hub side as gorilla.
var memLibs = []string{"coder", "gorilla", "gorilla-64k", "gorilla-64k-nopool"}

func tputCases(trs map[string]transport) []tputCase {
	v := func(name string, lib string, window uint32, coalesce bool) variant {
		return variant{name: name, tr: trs[lib], window: window, coalesce: coalesce}
	}
	matrix := []variant{
		{name: "tcp"},
		v("coder", "coder", 0, false),
		v("coder", "coder", 16*mib, false),
		v("coder+coalesce", "coder", 16*mib, true),
		v("gorilla", "gorilla", 0, false),
		v("gorilla", "gorilla", 16*mib, false),
		v("gorilla-agent64k", "gorilla-agent64k", 16*mib, false),
		v("gorilla-agent64k+coalesce", "gorilla-agent64k", 16*mib, true),
		v("gorilla-64k", "gorilla-64k", 16*mib, false),
	}
	// The window sweep: throughput against what the receiver may buffer
	// (up to one window per stream).
	sweep := []variant{
		v("coder", "coder", 1*mib, false),
		v("coder", "coder", 4*mib, false),
		v("gorilla-agent64k", "gorilla-agent64k", 1*mib, false),
		v("gorilla-agent64k", "gorilla-agent64k", 4*mib, false),
	}
	var cases []tputCase
	for _, dir := range []direction{up, down} {
		for _, streams := range []int{1, 32} {
			for _, x := range matrix {
				cases = append(cases, tputCase{v: x, streams: streams, dir: dir})
			}
			for _, x := range sweep {
				cases = append(cases, tputCase{v: x, streams: streams, dir: dir})
			}
		}
	}
	for i := range cases {
		if cases[i].v.tr != nil {
			cases[i].v.name += " w=" + windowName(cases[i].v.window)
		}
	}
	return cases
}

func windowName(w uint32) string {
	if w == 0 {
		return "256K(default)"
	}
	return fmt.Sprintf("%dM", w/mib)
}

func orchestrate(trs map[string]transport, n, reps int, warmup, dur time.Duration, doTput, doMem bool) error {
	fmt.Printf("date %s, %s %s/%s, %d CPUs (%s), kernel %s, GOMAXPROCS %d\n\n",
		time.Now().UTC().Format("2006-01-02"), runtime.Version(), runtime.GOOS, runtime.GOARCH,
		runtime.NumCPU(), cpuModel(), kernel(), runtime.GOMAXPROCS(0))
	if doTput {
		if err := throughputTable(trs, reps, warmup, dur); err != nil {
			return err
		}
	}
	if doMem {
		if err := memoryTable(n, reps); err != nil {
			return err
		}
	}
	return nil
}

func throughputTable(trs map[string]transport, reps int, warmup, dur time.Duration) error {
	cases := tputCases(trs)
	results := map[string][]tputResult{}
	for r := range reps {
		order := slices.Clone(cases)
		if r%2 == 1 {
			slices.Reverse(order) // alternate so drift on the box hits every case alike
		}
		for i, c := range order {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			res, err := runThroughput(ctx, c, warmup, dur)
			cancel()
			if err != nil {
				return fmt.Errorf("%s: %w", c.key(), err)
			}
			results[c.key()] = append(results[c.key()], res)
			fmt.Fprintf(os.Stderr, "rep %d/%d case %d/%d %-40s %2d %s %8.1f MB/s %.2f cpu-s/GiB %.0f MiB live\n",
				r+1, reps, i+1, len(order), c.v.name, c.streams, c.dir, res.mbps, res.cpuPerGiB, res.liveHeap/mib)
		}
	}

	fmt.Printf("Throughput: %s measured per case after %s warm-up, 32 KiB writes, median of %d runs (min–max); CPU is user+system of the whole process (both ends) per GiB received; live heap is the whole process's, after a GC at the end of the measured interval.\n\n",
		dur, warmup, reps)
	fmt.Println("| transport + yamux window | streams | direction | MB/s | min–max | × TCP | CPU s/GiB | live heap MiB |")
	fmt.Println("|---|---:|---|---:|---:|---:|---:|---:|")
	baseline := map[string]float64{}
	for _, c := range cases {
		rs := results[c.key()]
		mbps := median(rs, func(r tputResult) float64 { return r.mbps })
		if c.v.tr == nil {
			baseline[fmt.Sprint(c.streams, c.dir)] = mbps
		}
		lo := slices.MinFunc(rs, func(a, b tputResult) int { return cmp.Compare(a.mbps, b.mbps) }).mbps
		hi := slices.MaxFunc(rs, func(a, b tputResult) int { return cmp.Compare(a.mbps, b.mbps) }).mbps
		fmt.Printf("| %s | %d | %s | %.0f | %.0f–%.0f | %.2f | %.2f | %.0f |\n",
			c.v.name, c.streams, c.dir, mbps, lo, hi, mbps/baseline[fmt.Sprint(c.streams, c.dir)],
			median(rs, func(r tputResult) float64 { return r.cpuPerGiB }),
			median(rs, func(r tputResult) float64 { return r.liveHeap })/mib)
	}
	fmt.Println()
	return nil
}

func memoryTable(n, reps int) error {
	results := map[string][]memPerConn{}
	for r := range reps {
		order := slices.Clone(memLibs)
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, lib := range order {
			m, err := measureMemory(lib, n)
			if err != nil {
				return err
			}
			results[lib] = append(results[lib], m)
			fmt.Fprintf(os.Stderr, "rep %d/%d mem %-20s heap %.0f B stack %.0f B rss %.0f B goroutines %.2f per conn\n",
				r+1, reps, lib, m.Heap, m.Stack, m.RSS, m.Goroutines)
		}
	}
	fmt.Printf("Hub-side cost per idle connection: %d WebSocket connections from a child process, each with a yamux session (keepalive off) that has exchanged one ping and echoed 256 KiB on one stream, then idle; growth of the hub process divided by %d, after GC; median of %d runs.\n\n", n, n, reps)
	fmt.Println("| transport | heap KiB/conn | stack KiB/conn | RSS KiB/conn | goroutines/conn | heap+stack for 10,000 agents |")
	fmt.Println("|---|---:|---:|---:|---:|---:|")
	for _, lib := range memLibs {
		rs := results[lib]
		heap := median(rs, func(m memPerConn) float64 { return m.Heap })
		stack := median(rs, func(m memPerConn) float64 { return m.Stack })
		fmt.Printf("| %s | %.1f | %.1f | %.1f | %.1f | %.0f MiB |\n", lib, heap/1024, stack/1024,
			median(rs, func(m memPerConn) float64 { return m.RSS })/1024,
			median(rs, func(m memPerConn) float64 { return m.Goroutines }),
			(heap+stack)*10000/mib)
	}
	fmt.Println()
	return nil
}

func median[T any](xs []T, f func(T) float64) float64 {
	vs := make([]float64, len(xs))
	for i, x := range xs {
		vs[i] = f(x)
	}
	slices.Sort(vs)
	if len(vs) == 0 {
		return 0
	}
	if len(vs)%2 == 1 {
		return vs[len(vs)/2]
	}
	return (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "model name"); ok {
			return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(rest), ":"))
		}
	}
	return "unknown CPU"
}

func kernel() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}
