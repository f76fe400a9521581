package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tetherhq/tether/internal/agent"
	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/listfile"
)

// agentToken is the token of simulated agent i: derived, so the hub's list
// and the agents agree without passing 10,000 tokens around.
func agentToken(i int) string {
	s := sha256.Sum256([]byte(fmt.Sprintf("tether-bench-agent-%d", i)))
	return hex.EncodeToString(s[:])
}

func agentName(i int) string { return fmt.Sprintf("a%05d", i) }

// connectLog records when each agent logged that it connected.
type connectLog struct {
	mu    sync.Mutex
	times []int64 // unix milliseconds
}

func (l *connectLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *connectLog) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, "Connected to ") {
		l.mu.Lock()
		l.times = append(l.times, r.Time.UnixMilli())
		l.mu.Unlock()
	}
	return nil
}
func (l *connectLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *connectLog) WithGroup(string) slog.Handler      { return l }

type agentsStats struct {
	Connected int     `json:"connected"`
	Connects  []int64 `json:"connects"`
}

// agentsChild runs many agents in one process, each the real agent package
// with its own WebSocket and TLS connection: the machine's file limit keeps
// them out of the hub's process.
func agentsChild(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("agents", flag.ExitOnError)
	first := fs.Int("first", 0, "the first agent's number")
	count := fs.Int("count", 1000, "how many")
	rate := fs.Int("rate", 500, "agents started per second")
	hubURL := fs.String("hub", "", "the hub's URL")
	caFile := fs.String("ca", "", "the hub's CA")
	saDir := fs.String("sa", "", "a service account directory")
	apiServer := fs.String("api", "127.0.0.1:1", "the API server the agents relay to")
	hubs := fs.String("hubs", "", "the replicas' addresses, comma-separated: each agent dials -home's first, then others (replicaDialer)")
	home := fs.Int("home", 0, "with -hubs, the replica each agent dials first")
	fs.Parse(args)
	u, err := url.Parse(*hubURL)
	if err != nil {
		return err
	}
	p, err := loadPool(*caFile)
	if err != nil {
		return err
	}
	tlsConfig := &tls.Config{RootCAs: p, MinVersion: tls.VersionTLS12}
	rec := &connectLog{}
	log := slog.New(rec)
	agents := make([]*agent.Agent, *count)
	for i := range agents {
		cfg := agent.Config{
			Options: agent.Options{HubURL: u, Name: agentName(*first + i), Token: agentToken(*first + i),
				TokenReread: time.Minute, ServiceAccountDir: *saDir, APIServer: *apiServer},
			Logger: log, TLSConfig: tlsConfig,
		}
		if *hubs != "" {
			cfg.DialHub = replicaDialer(strings.Split(*hubs, ","), *home)
		}
		a, err := agent.New(cfg)
		if err != nil {
			return err
		}
		agents[i] = a
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/stats", func(w http.ResponseWriter, r *http.Request) {
		var s agentsStats
		for _, a := range agents {
			if a.Connected() {
				s.Connected++
			}
		}
		rec.mu.Lock()
		s.Connects = append(s.Connects, rec.times...)
		rec.mu.Unlock()
		json.NewEncoder(w).Encode(s)
	})
	mux.HandleFunc("/debug/pprof/", pprof.Index) // for a look while it runs
	go http.Serve(ln, mux)
	fmt.Printf("READY %s\n", ln.Addr())
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / time.Duration(*rate))
	for _, a := range agents {
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
		wg.Add(1)
		go func() { defer wg.Done(); a.Run(ctx) }()
	}
	tick.Stop()
	wg.Wait()
	return nil
}

// fleetRun is a hub and the processes of agents connected to it.
type fleetRun struct {
	dir    string
	self   string
	hubURL string
	hubCA  string // the hub's CA file, for the agents
	saDir  string // the agents' service account directory
	hubEnv []string
	hub    *child
	kids   []*child
	stats  []string // each agents process's stats URL
}

// newFleet writes what a hub and n agents need under dir (the hub's
// certificate, its agents list, a service account directory whose ca.crt is
// clusterCA, or the hub's CA when nil) and starts the hub. Agents come with
// startAgents; stop ends them all.
func newFleet(ctx context.Context, dir string, n int, clusterCA []byte) (*fleetRun, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	hf, err := writeHubCert(dir)
	if err != nil {
		return nil, err
	}
	var list strings.Builder
	for i := range n {
		fmt.Fprintf(&list, "- name: %s\n  tokenSha256: %s\n", agentName(i), listfile.TokenSHA256(agentToken(i)))
	}
	listFile := filepath.Join(dir, "agents.yaml")
	if err := os.WriteFile(listFile, []byte(list.String()), 0o600); err != nil {
		return nil, err
	}
	if clusterCA == nil {
		clusterCA = mustRead(hf.caFile)
	}
	saDir := filepath.Join(dir, "sa")
	os.MkdirAll(saDir, 0o755)
	os.WriteFile(filepath.Join(saDir, "token"), []byte("bench-service-account-token"), 0o600)
	os.WriteFile(filepath.Join(saDir, "ca.crt"), clusterCA, 0o600)
	userToken, _ := fleet.NewToken()
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	self, _ := os.Executable()
	hubURL := "https://" + addr
	f := &fleetRun{dir: dir, self: self, hubURL: hubURL, hubCA: hf.caFile, saDir: saDir, hubEnv: benchHubEnv(addr, hf, dir,
		"TETHER_FLEET_AGENTS_FILE="+listFile, fmt.Sprintf("- name: %s\n  tokenSha256: %s\n", benchUser, listfile.TokenSHA256(userToken)))}
	if err := f.startHub(ctx, 1); err != nil {
		return nil, err
	}
	return f, nil
}

// startAgents starts agents first to first+count-1, in processes of up to
// 2,500, relaying to api ("": an address where nothing listens).
func (f *fleetRun) startAgents(ctx context.Context, first, count int, api string) error {
	const perProc = 2500
	for s := first; s < first+count; s += perProc {
		n := min(perProc, first+count-s)
		args := []string{f.self, "child", "agents", "-first", fmt.Sprint(s), "-count", fmt.Sprint(n),
			"-hub", f.hubURL, "-ca", f.hubCA, "-sa", f.saDir, "-rate", "400"}
		if api != "" {
			args = append(args, "-api", api)
		}
		k, err := startChild(ctx, "agents", args, nil, filepath.Join(f.dir, fmt.Sprintf("agents-%d.log", s)), true)
		if err != nil {
			return err
		}
		f.kids = append(f.kids, k)
		f.stats = append(f.stats, "http://"+k.ready[0]+"/stats")
	}
	return nil
}

// stop stops the agents, then the hub.
func (f *fleetRun) stop() {
	for _, k := range f.kids {
		k.stop(20 * time.Second)
	}
	f.hub.stop(40 * time.Second)
}

func (f *fleetRun) startHub(ctx context.Context, n int) error {
	h, err := startChild(ctx, "hub", []string{f.self, "child", "hub"}, f.hubEnv, filepath.Join(f.dir, fmt.Sprintf("hub-%d.log", n)), true)
	if err != nil {
		return err
	}
	f.hub = h
	return nil
}

func (f *fleetRun) hubStats() (hubStats, error) {
	var s hubStats
	err := getJSON("http://"+f.hub.ready[1]+"/stats", &s)
	return s, err
}

// saveProfiles writes the hub's heap profile and goroutines into f.dir, as
// hub-heap-n.pprof and hub-goroutines-n.txt, for a look after the run.
func (f *fleetRun) saveProfiles(n int) {
	for _, p := range []struct{ path, file string }{
		{"/debug/pprof/heap", fmt.Sprintf("hub-heap-%d.pprof", n)},
		{"/debug/pprof/goroutine?debug=1", fmt.Sprintf("hub-goroutines-%d.txt", n)},
	} {
		saveURL("http://"+f.hub.ready[1]+p.path, filepath.Join(f.dir, p.file))
	}
}

// saveURL writes what url answers into the file at path, if it answers.
func saveURL(url, path string) {
	resp, err := http.Get(url)
	if err != nil {
		return
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	os.WriteFile(path, b, 0o644)
}

func (f *fleetRun) agentsStats() (connected int, connects []int64, err error) {
	for _, u := range f.stats {
		var s agentsStats
		if err := getJSON(u, &s); err != nil {
			return 0, nil, err
		}
		connected += s.Connected
		connects = append(connects, s.Connects...)
	}
	return connected, connects, nil
}

// waitConnected waits until n agents are connected.
func (f *fleetRun) waitConnected(ctx context.Context, n int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		c, _, err := f.agentsStats()
		if err == nil && c >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d agents connected after %s (err %v)", c, n, limit, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// fleetOpts size the fleet part.
type fleetOpts struct {
	sizes  []int         // fleets to measure, growing; the last is the largest
	settle time.Duration // how long a fleet rests before the hub is measured
	storm  bool          // restart the hub under the largest fleet
}

func benchFleet(ctx context.Context, r *report, dir string, o fleetOpts) error {
	max := o.sizes[len(o.sizes)-1]
	f, err := newFleet(ctx, dir, max, nil)
	if err != nil {
		return err
	}
	defer f.stop()
	time.Sleep(2 * time.Second)
	base, err := f.hubStats()
	if err != nil {
		return err
	}
	have := 0
	for _, n := range o.sizes {
		if err := f.startAgents(ctx, have, n-have, ""); err != nil {
			return err
		}
		have = n
		if err := f.waitConnected(ctx, n, 3*time.Minute); err != nil {
			return err
		}
		time.Sleep(o.settle) // past a probe round and, in the full bench, the first heartbeats
		s, err := f.hubStats()
		if err != nil {
			return err
		}
		per := func(a, b uint64) float64 { return (float64(a) - float64(b)) / float64(n) / 1024 }
		rss := float64(s.RSS-base.RSS) / float64(n) / 1024
		heap := per(s.HeapAlloc, base.HeapAlloc)
		stack := per(s.StackInuse, base.StackInuse)
		g := float64(s.Goroutines-base.Goroutines) / float64(n)
		name := fmt.Sprintf("idle fleet of %d agents (TLS): hub", n)
		detail := fmt.Sprintf("hub RSS %.0f MiB, heap %.0f MiB, %d goroutines; before agents %.0f MiB, %.0f MiB, %d", float64(s.RSS)/(1<<20), float64(s.HeapAlloc)/(1<<20), s.Goroutines, float64(base.RSS)/(1<<20), float64(base.HeapAlloc)/(1<<20), base.Goroutines)
		r.add(atMost(figure{Section: "fleet", Name: name + " RSS per agent", Value: rss, Unit: "KiB", Detail: detail + "; read after debug.FreeOSMemory"}, 32))
		r.add(atMost(figure{Section: "fleet", Name: name + " heap + stacks per agent", Value: heap + stack, Unit: "KiB", Detail: fmt.Sprintf("heap %.1f KiB, stacks %.1f KiB (after GC)", heap, stack)}, 20))
		f.saveProfiles(n)
		r.add(figure{Section: "fleet", Name: name + " RSS beyond heap + stacks per agent", Value: rss - heap - stack, Unit: "KiB", Detail: classesPerAgent(s.Classes, base.Classes, n)})
		r.add(atMost(figure{Section: "fleet", Name: name + " goroutines per agent", Value: g, Unit: "goroutines",
			Detail: "the simulated agents open no inventory stream; a real agent's adds one goroutine on the hub while it is open"}, 3))
	}
	ok := true
	if max >= 10000 {
		r.add(figure{Section: "fleet", Name: fmt.Sprintf("idle fleet: %d agents connected to one hub", max), Value: float64(max), Unit: "agents", Budget: "10000", Pass: &ok})
	}
	if !o.storm {
		return nil
	}
	return storm(ctx, r, f, max)
}

// storm restarts the hub under n agents and times their return.
func storm(ctx context.Context, r *report, f *fleetRun, n int) error {
	_, before, err := f.agentsStats()
	if err != nil {
		return err
	}
	t0 := time.Now()
	if s, err := strconv.Atoi(os.Getenv("BENCH_DUMP")); err == nil {
		// For finding what a slow shutdown waits for: BENCH_DUMP=s kills
		// the hub with SIGQUIT s seconds into its shutdown, and its stacks
		// go to its log.
		old := f.hub
		go func() {
			time.Sleep(time.Duration(s) * time.Second)
			old.cmd.Process.Signal(syscall.SIGQUIT) // if it has not exited yet
		}()
	}
	f.hub.stop(60 * time.Second)
	stopped := time.Since(t0)
	if err := f.startHub(ctx, 2); err != nil {
		return err
	}
	restarted := time.Since(t0)
	werr := f.waitConnected(ctx, n, 3*time.Minute)
	hubCPU := f.hub.cpu() // the new hub's, taking everyone back
	_, after, err := f.agentsStats()
	if err != nil {
		return err
	}
	seen := map[int64]int{}
	for _, t := range before {
		seen[t]++
	}
	buckets := map[int64]int{}
	var last int64
	count := 0
	for _, t := range after {
		if seen[t] > 0 {
			seen[t]--
			continue
		}
		count++
		b := (t - t0.UnixMilli()) / 1000
		buckets[b]++
		last = max(last, t-t0.UnixMilli())
	}
	peak := 0
	for _, c := range buckets {
		peak = max(peak, c)
	}
	if werr != nil {
		return werr
	}
	r.add(atMost(figure{Section: "fleet", Name: fmt.Sprintf("reconnect storm: hub restarted under %d agents, seconds until all back", n), Value: float64(last) / 1000, Unit: "s",
		Detail: fmt.Sprintf("from SIGTERM to the old hub; it was gone after %.1f s, the new one listening at %.1f s, all back %.1f s after that; %d reconnections; the new hub used %.2f CPU-s",
			stopped.Seconds(), restarted.Seconds(), float64(last)/1000-restarted.Seconds(), count, hubCPU.Seconds())}, 60))
	r.add(atMost(figure{Section: "fleet", Name: "reconnect storm: largest share reconnecting in one second", Value: float64(peak) / float64(n), Unit: "share",
		Detail: fmt.Sprintf("%d agents in the busiest second", peak)}, 0.10))
	return nil
}

func mustRead(p string) []byte {
	b, _ := os.ReadFile(p)
	return b
}

// classesPerAgent is the growth of each runtime/metrics memory class per
// agent, in KiB, largest first: what the hub's RSS per agent is made of.
func classesPerAgent(now, before map[string]uint64, n int) string {
	type class struct {
		name string
		kib  float64
	}
	var cs []class
	for k, v := range now {
		d := (float64(v) - float64(before[k])) / float64(n) / 1024
		if d >= 0.05 || d <= -0.05 {
			cs = append(cs, class{k, d})
		}
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].kib > cs[j].kib })
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = fmt.Sprintf("%s %.1f", c.name, c.kib)
	}
	return "KiB per agent by runtime/metrics class: " + strings.Join(parts, ", ")
}
