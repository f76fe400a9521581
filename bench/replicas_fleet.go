package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tetherhq/tether/internal/pki"
)

// replicaDialer makes an agent's connections to the replicas at addrs as a
// load balancer in front of them would, without a process in between (on
// one machine, its descriptors would count twice more): the first to
// addrs[home], each later one to another replica than the last, chosen at
// random, so a moved or orphaned agent lands on any of the others; a
// replica that refuses the connection (stopped, killed) is skipped, as a
// load balancer drops an endpoint that fails.
func replicaDialer(addrs []string, home int) func(ctx context.Context, network, addr string) (net.Conn, error) {
	var mu sync.Mutex
	last := -1
	return func(ctx context.Context, network, _ string) (net.Conn, error) {
		mu.Lock()
		order := []int{home}
		if last >= 0 {
			order = order[:0]
			for _, i := range rand.Perm(len(addrs)) {
				if i != last {
					order = append(order, i)
				}
			}
			order = append(order, last)
		}
		mu.Unlock()
		var d net.Dialer
		var err error
		for _, i := range order {
			var c net.Conn
			if c, err = d.DialContext(ctx, network, addrs[i]); err == nil {
				mu.Lock()
				last = i
				mu.Unlock()
				return c, nil
			}
		}
		return nil, err
	}
}

// writes counts the coordination writes the replicas made to the API
// server, from its audit log: every create, update, patch or delete by the
// replicas' user, as each completed.
type writes struct {
	path   string
	offset int64
}

type auditEvent struct {
	Stage     string                    `json:"stage"`
	Verb      string                    `json:"verb"`
	User      struct{ Username string } `json:"user"`
	ObjectRef struct{ Resource string } `json:"objectRef"`
	At        time.Time                 `json:"stageTimestamp"`
}

// since returns the writes logged since the last call, their times, and
// how many there were of each resource and verb.
func (w *writes) since() ([]time.Time, map[string]int, error) {
	f, err := os.Open(w.path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	if _, err := f.Seek(w.offset, io.SeekStart); err != nil {
		return nil, nil, err
	}
	br := bufio.NewReaderSize(f, 1<<20)
	var at []time.Time
	kinds := map[string]int{}
	for {
		line, err := br.ReadBytes('\n')
		if err != nil {
			break // a line still being written is read next time
		}
		w.offset += int64(len(line))
		var e auditEvent
		if json.Unmarshal(line, &e) != nil || e.Stage != "ResponseComplete" || e.User.Username != "admin" {
			continue
		}
		switch e.Verb {
		case "create", "update", "patch", "delete", "deletecollection":
			at = append(at, e.At)
			kinds[e.ObjectRef.Resource+" "+e.Verb]++
		}
	}
	return at, kinds, nil
}

func kindsString(k map[string]int) string {
	var parts []string
	for n, c := range k {
		parts = append(parts, fmt.Sprintf("%s %d", n, c))
	}
	sort.Strings(parts)
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// busiestSecond is the most of times (sorted or not) within any one second.
func busiestSecond(times []time.Time) int {
	ms := make([]int64, len(times))
	for i, t := range times {
		ms[i] = t.UnixMilli()
	}
	return busiestSecondMs(ms)
}

func busiestSecondMs(ms []int64) int {
	s := append([]int64(nil), ms...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	peak, j := 0, 0
	for i := range s {
		for s[i]-s[j] >= 1000 {
			j++
		}
		peak = max(peak, i-j+1)
	}
	return peak
}

// replicaFleet spreads o.perHub simulated agents on each replica, measures
// each replica's growth per agent, its CPU and the coordination writes at
// rest, then kills a replica, and updates all of them in turn under
// requests.
func replicaFleet(ctx context.Context, r *report, b *replicaBed, o replicaOpts) error {
	n := len(b.hubs)
	total := n * o.perHub
	// The agents' API server: nothing listens at its address while the
	// replicas' memory is measured, as in the fleet part; then it answers
	// the replicas' probes, so the clusters are Ready.
	ca, err := pki.NewCA("bench cluster CA", 24*time.Hour)
	if err != nil {
		return err
	}
	cert, err := ca.IssueTLS(pki.Leaf{CommonName: "kube-apiserver", Hosts: []string{"kubernetes.default.svc", "127.0.0.1"}})
	if err != nil {
		return err
	}
	apiAddr, err := freePort()
	if err != nil {
		return err
	}
	saDir := filepath.Join(b.dir, "sa")
	os.MkdirAll(saDir, 0o755)
	os.WriteFile(filepath.Join(saDir, "token"), []byte("bench-service-account-token"), 0o600)
	os.WriteFile(filepath.Join(saDir, "ca.crt"), ca.CertPEM, 0o600)

	time.Sleep(2 * time.Second)
	base := make([]hubStats, n)
	for i := range n {
		if base[i], err = b.stats(i); err != nil {
			return err
		}
	}
	var kids []*child
	var stats []string
	defer func() {
		for _, k := range kids {
			k.stop(20 * time.Second)
		}
	}()
	// One process of agents per replica, homed on it, started at a pace
	// under the replica's admission (a twentieth of the list a second), so
	// none is sent elsewhere by a 503.
	rate := max(50, min(400, total/20*3/4))
	for i := range n {
		args := []string{b.self, "child", "agents", "-first", fmt.Sprint(i * o.perHub), "-count", fmt.Sprint(o.perHub),
			"-hub", "https://" + b.addrs[i], "-hubs", strings.Join(b.addrs, ","), "-home", fmt.Sprint(i),
			"-ca", b.files.caFile, "-sa", saDir, "-rate", fmt.Sprint(rate), "-api", apiAddr}
		k, err := startChild(ctx, "agents", args, nil, filepath.Join(b.dir, fmt.Sprintf("agents-%d.log", i)), true)
		if err != nil {
			return err
		}
		kids = append(kids, k)
		stats = append(stats, "http://"+k.ready[0]+"/stats")
	}
	fr := &fleetRun{stats: stats}
	if err := fr.waitConnected(ctx, total, 3*time.Minute); err != nil {
		return err
	}
	time.Sleep(o.settle)
	var rss, gor []float64
	var details []string
	for i := range n {
		s, err := b.stats(i)
		if err != nil {
			return err
		}
		rss = append(rss, float64(s.RSS-base[i].RSS)/float64(o.perHub)/1024)
		gor = append(gor, float64(s.Goroutines-base[i].Goroutines)/float64(o.perHub))
		details = append(details, fmt.Sprintf("replica %d: RSS %.0f MiB (%.0f before), %d goroutines (%d)", i, float64(s.RSS)/(1<<20), float64(base[i].RSS)/(1<<20), s.Goroutines, base[i].Goroutines))
		// For a look after the run: `go tool pprof` on the file.
		saveURL("http://"+b.hubs[i].ready[1]+"/debug/pprof/heap", filepath.Join(b.dir, fmt.Sprintf("replica-heap-%d.pprof", i)))
	}
	sort.Float64s(rss)
	sort.Float64s(gor)
	title := fmt.Sprintf("%d replicas, %d agents each (TLS)", n, o.perHub)
	r.add(atMost(figure{Section: "replicas-fleet", Name: title + ": RSS per agent on its replica, the largest", Value: rss[n-1], Unit: "KiB",
		Detail: fmt.Sprintf("per replica %s KiB; read after debug.FreeOSMemory; each replica also knows the others' %d clusters (their claims); %s", fmtList(rss), (n-1)*o.perHub, strings.Join(details, "; "))}, 32))
	r.add(atMost(figure{Section: "replicas-fleet", Name: title + ": goroutines per agent on its replica, the largest", Value: gor[n-1], Unit: "goroutines",
		Detail: "per replica " + fmtList(gor) + "; the simulated agents open no inventory stream"}, 3))

	// The clusters Ready: their API server answers from now on.
	srv, err := answerProbes(apiAddr, cert)
	if err != nil {
		return err
	}
	defer srv.Close()
	names := map[string]bool{}
	for i := range total {
		names[agentName(i)] = true
	}
	if _, err := b.waitReady(ctx, -1, names, readyLimit(total)); err != nil {
		return err
	}
	time.Sleep(o.settle)
	w := &writes{path: b.cluster.AuditLogPath}
	if _, _, err := w.since(); err != nil { // skip what came before
		return err
	}
	cpu0 := make([]time.Duration, n)
	for i := range n {
		cpu0[i] = b.hubs[i].cpu()
	}
	agents0, machine0 := childrenCPU(kids), machineCPU()
	select {
	case <-time.After(o.window):
	case <-ctx.Done():
		return ctx.Err()
	}
	at, kinds, err := w.since()
	if err != nil {
		return err
	}
	var cores []float64
	for i := range n {
		cores = append(cores, (b.hubs[i].cpu()-cpu0[i]).Seconds()/o.window.Seconds()*100)
	}
	agentsCores := (childrenCPU(kids) - agents0).Seconds() / o.window.Seconds() * 100
	machineCores := (machineCPU() - machine0).Seconds() / o.window.Seconds() * 100
	perReplica := float64(len(at)) / float64(n) / o.window.Seconds() * 2
	r.add(atMost(figure{Section: "replicas-fleet", Name: "coordination writes to the API server at rest, per replica per 2 s", Value: perReplica, Unit: "writes",
		Detail: fmt.Sprintf("%d writes by the %d replicas in %s (from the API server's audit log): %s", len(at), n, o.window, kindsString(kinds))}, 1))
	sorted := append([]float64(nil), cores...)
	sort.Float64s(sorted)
	r.add(figure{Section: "replicas-fleet", Name: "replica CPU at rest, the busiest", Value: sorted[n-1], Unit: "% of a core",
		Detail: fmt.Sprintf("per replica %s %% over %s, %d agents each, their API servers answering the probes (every 10 s); meanwhile the simulated agents' processes used %.0f %% of a core together, and the whole machine %.0f %% of the %d %% its %d cores have",
			fmtList(cores), o.window, o.perHub, agentsCores, machineCores, 100*runtime.NumCPU(), runtime.NumCPU())})

	if !o.kill {
		return nil
	}
	if err := killReplica(ctx, r, b, fr, w, names, total, o.rolling); err != nil {
		return err
	}
	if !o.rolling {
		return nil
	}
	if err := rollingUpdate(ctx, r, b, w, names, o.rollingRP); err != nil {
		return err
	}
	return evenedOut(ctx, r, b, total)
}

// evenedOut times, from the end of the rolling update, how long the
// replicas take to hold about a share each: none more than its share and
// the tenth the hub allows (internal/hub/balance.go). Agents stay where
// they connect; the replica restarted last would otherwise hold none.
func evenedOut(ctx context.Context, r *report, b *replicaBed, total int) error {
	n := len(b.hubs)
	share := (total + n - 1) / n
	most := func() (int, []int, error) {
		held := make([]int, n)
		m := 0
		for i := range n {
			k, err := b.held(i)
			if err != nil {
				return 0, nil, err
			}
			held[i], m = k, max(m, k)
		}
		return m, held, nil
	}
	first, atEnd, err := most()
	if err != nil {
		return err
	}
	t0 := time.Now()
	limit := share + max(1, share/10)
	m, held := first, atEnd
	for m > limit && time.Since(t0) < 3*time.Minute {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
		if m, held, err = most(); err != nil {
			return err
		}
	}
	took := time.Since(t0)
	fmtInts := func(xs []int) string { return strings.Trim(fmt.Sprint(xs), "[]") }
	r.add(figure{Section: "replicas-fleet", Name: "after the rolling update: the most agents one replica held ÷ an even share", Value: float64(first) / float64(share), Unit: "×",
		Detail: fmt.Sprintf("agents held by each replica as the update ended: %s, of %d (an even share %d)", fmtInts(atEnd), total, share)})
	r.add(figure{Section: "replicas-fleet", Name: "after the rolling update: seconds until no replica held more than its share and a tenth", Value: took.Seconds(), Unit: "s",
		Detail: fmt.Sprintf("then %s; the replicas over their share ask agents to move (make-before-break, a fifth of their admission pace a second) while another holds fewer", fmtInts(held))})
	return nil
}

// readyLimit bounds the wait for a fleet of total clusters to be Ready
// everywhere, the first probes of all of them made through the one
// machine: 2 minutes for 6,000, 5 for 15,000 (on 2 cores, 14,330 and
// 14,964 of 15,000 were Ready after 2). A bound on a step, not a figure.
func readyLimit(total int) time.Duration {
	return max(2*time.Minute, time.Duration(total)*20*time.Millisecond)
}

// childrenCPU is the CPU time the processes in cs have used so far.
func childrenCPU(cs []*child) time.Duration {
	var t time.Duration
	for _, c := range cs {
		t += c.cpu()
	}
	return t
}

// machineCPU is the CPU time every process on the machine has used, from
// /proc/stat: user, nice, system, irq and softirq, not idle or iowait.
func machineCPU() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal…
	var ticks int64
	for _, i := range []int{1, 2, 3, 6, 7} {
		if i < len(f) {
			n, _ := strconv.ParseInt(f[i], 10, 64)
			ticks += n
		}
	}
	return time.Duration(ticks) * time.Second / 100 // USER_HZ is 100 on Linux
}

func fmtList(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmtValue(x, "")
	}
	return strings.Join(parts, ", ")
}

// answerProbes serves /readyz and /version on addr with cert, as the
// agents' API server.
func answerProbes(addr string, cert tls.Certificate) (*http.Server, error) {
	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	mux.HandleFunc("/version", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{"gitVersion":"v1.36.3-bench"}`)) })
	ln, err := tls.Listen("tcp", addr, &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		return nil, err
	}
	// A probe cut off by a replica's end is no news.
	srv := &http.Server{Handler: mux, ErrorLog: log.New(io.Discard, "", 0)}
	go srv.Serve(ln)
	return srv, nil
}

// killReplica kills replica 0 (SIGKILL: no drain, its Lease not given
// up) and times its clusters' return on the others, then starts it again.
func killReplica(ctx context.Context, r *report, b *replicaBed, fr *fleetRun, w *writes, names map[string]bool, total int, restart bool) error {
	_, before, err := fr.agentsStats()
	if err != nil {
		return err
	}
	w.since()
	others := make([]time.Duration, len(b.hubs))
	for i := 1; i < len(b.hubs); i++ {
		others[i] = b.hubs[i].cpu()
	}
	machine0 := machineCPU()
	t0 := time.Now()
	b.hubs[0].kill()
	back, err := b.waitReady(ctx, 0, names, time.Minute)
	if err != nil {
		return err
	}
	took := back.Sub(t0)
	machine := machineCPU() - machine0
	var taking time.Duration
	for i := 1; i < len(b.hubs); i++ {
		taking += b.hubs[i].cpu() - others[i]
	}
	at, kinds, err := w.since()
	if err != nil {
		return err
	}
	_, after, err := fr.agentsStats()
	if err != nil {
		return err
	}
	seen := map[int64]int{}
	for _, t := range before {
		seen[t]++
	}
	var again []int64
	for _, t := range after {
		if seen[t] > 0 {
			seen[t]--
			continue
		}
		again = append(again, t)
	}
	// The busiest second counted as the fleet part's storm counts it, in
	// whole seconds from the SIGKILL, and beside it the busiest of any
	// second: the agents log their connections in bursts when the
	// machine's two cores are busy, so the latter reads the hubs'
	// admission (any second) less exactly.
	slots := map[int64]int{}
	peak := 0
	for _, t := range again {
		k := (t - t0.UnixMilli()) / 1000
		slots[k]++
		peak = max(peak, slots[k])
	}
	sliding := busiestSecondMs(again)
	var last int64
	for _, t := range again {
		last = max(last, t-t0.UnixMilli())
	}
	r.add(atMost(figure{Section: "replicas-fleet", Name: fmt.Sprintf("replica killed under %d agents: seconds until all its clusters are Ready on the others", total), Value: took.Seconds(), Unit: "s",
		Detail: fmt.Sprintf("SIGKILL to replica 0, which held %d; both others showed every cluster Ready again after %.1f s; %d reconnections, the last %.1f s after the SIGKILL", total/len(b.hubs), took.Seconds(), len(again), float64(last)/1000)}, 30))
	r.add(atMost(figure{Section: "replicas-fleet", Name: "replica killed: largest share of the fleet reconnecting in one second", Value: float64(peak) / float64(total), Unit: "share",
		Detail: fmt.Sprintf("%d agents in the busiest second from the SIGKILL, as the agents logged it, of %d (in any one second: %d, %.3f); each replica admits its share of a twentieth of the agents list a second (its share among the replicas it knows: a third while the killed one's Lease lasts, then a half), so the %d others together at most a twentieth", peak, total, sliding, float64(sliding)/float64(total), len(b.hubs)-1)}, 0.10))
	// What taking the agents in cost the replicas, against what the
	// whole machine spent meanwhile: on one machine the simulated agents
	// and their API servers' stand-in share the cores with the replicas.
	held := total / len(b.hubs)
	r.add(figure{Section: "replicas-fleet", Name: "replica killed: the others' CPU per agent they took in", Value: float64(taking.Milliseconds()) / float64(max(1, held)), Unit: "ms",
		Detail: fmt.Sprintf("the %d others used %.1f CPU-s until all %d were back (their probes of every cluster included), the whole machine %.1f CPU-s of the %.1f its %d cores had in the %.1f s",
			len(b.hubs)-1, taking.Seconds(), held, machine.Seconds(), took.Seconds()*float64(runtime.NumCPU()), runtime.NumCPU(), took.Seconds())})
	secs := max(took.Seconds(), 1)
	r.add(atMost(figure{Section: "replicas-fleet", Name: "coordination writes to the API server while the agents reconnect", Value: float64(len(at)) / secs, Unit: "writes/s",
		Detail: fmt.Sprintf("%d writes in the %.1f s until all were back, at most %d in any one second: %s", len(at), secs, busiestSecond(at), kindsString(kinds))}, 50))
	if !restart {
		return nil
	}
	// Replica 0 again, as its Deployment would start a new pod.
	if err := b.start(ctx, 0); err != nil {
		return err
	}
	_, err = b.waitReady(ctx, -1, names, readyLimit(len(names)))
	return err
}

// rollingUpdate stops each replica in turn as a Deployment stops a pod
// (SIGTERM; the replica is taken out of the people's rotation once it
// says it drains, as endpoints follow its failing /readyz) and starts it
// again, while people's GETs go to the clusters at rps a second, spread
// over them and over the replicas, over HTTP/2, each waiting out a
// Retry-After as client-go does (up to 10 times). Any other answer than
// 200, and any error, counts as a failure.
func rollingUpdate(ctx context.Context, r *report, b *replicaBed, w *writes, names map[string]bool, rps int) error {
	n := len(b.hubs)
	var enabled [8]atomic.Bool
	for i := range n {
		enabled[i].Store(true)
	}
	var next atomic.Uint32
	dial := func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		var err error
		for range n {
			i := int(next.Add(1)) % n
			if !enabled[i].Load() {
				continue
			}
			var c net.Conn
			if c, err = d.DialContext(ctx, network, b.addrs[i]); err == nil {
				return c, nil
			}
		}
		if err == nil {
			err = fmt.Errorf("no replica in the rotation")
		}
		return nil, err
	}
	// Several connections, as several people's kubectl: each lands on a
	// replica of the rotation.
	clients := make([]*http.Client, 6)
	for i := range clients {
		clients[i] = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: b.clientTLS(), ForceAttemptHTTP2: true, DialContext: dial}}
	}
	list := make([]string, 0, len(names))
	for name := range names {
		list = append(list, name)
	}
	sort.Strings(list)
	var requests, failures, waited atomic.Int64
	var mu sync.Mutex
	failKinds := map[string]int{} // failures by what they said, the cluster's name and numbers left out
	get := func(k int) {
		c := clients[k%len(clients)]
		name := list[rand.IntN(len(list))]
		for attempt := 0; ; attempt++ {
			req, _ := http.NewRequestWithContext(ctx, "GET", "https://"+b.addrs[0]+"/clusters/"+name+"/version", nil)
			req.Header.Set("Authorization", "Bearer "+b.userToken)
			resp, err := c.Do(req)
			if err == nil {
				body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
				resp.Body.Close()
				if ra := resp.Header.Get("Retry-After"); ra != "" && attempt < 10 && (resp.StatusCode == 503 || resp.StatusCode == 429) {
					waited.Add(1)
					var s int
					fmt.Sscan(ra, &s)
					time.Sleep(time.Duration(max(1, min(s, 10))) * time.Second)
					continue
				}
				if resp.StatusCode == 200 && resp.ProtoMajor == 2 {
					return
				}
				err = fmt.Errorf("%s %s after %d Retry-After: %s", resp.Proto, resp.Status, attempt, statusMessage(body))
			}
			if ctx.Err() != nil {
				return
			}
			failures.Add(1)
			// One kind whatever the cluster, port or count.
			why := digits.ReplaceAllString(strings.ReplaceAll(err.Error(), name, "NAME"), "N")
			mu.Lock()
			failKinds[why]++
			mu.Unlock()
			return
		}
	}
	lctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Second / time.Duration(rps))
		defer tick.Stop()
		for k := 0; ; k++ {
			select {
			case <-lctx.Done():
				return
			case <-tick.C:
			}
			requests.Add(1)
			wg.Add(1)
			go func() { defer wg.Done(); get(k) }()
		}
	}()
	w.since()
	began := time.Now()
	var steps []string
	var err error
	var slowest time.Duration
	for i := range n {
		t := time.Now()
		b.hubs[i].cmd.Process.Signal(syscall.SIGTERM)
		if err = b.waitLog(ctx, i, "Draining", 10*time.Second); err != nil {
			break
		}
		enabled[i].Store(false)
		select {
		case <-b.hubs[i].done:
		case <-time.After(3 * time.Minute):
			err = fmt.Errorf("replica %d still runs 3 minutes after SIGTERM", i)
		}
		if err != nil {
			break
		}
		exited := time.Since(t)
		slowest = max(slowest, exited)
		if err = b.start(ctx, i); err != nil {
			break
		}
		enabled[i].Store(true)
		if _, err = b.waitReady(ctx, -1, names, readyLimit(len(names))); err != nil {
			break
		}
		steps = append(steps, fmt.Sprintf("replica %d: exited %.1f s after SIGTERM, all Ready again %.1f s after it", i, exited.Seconds(), time.Since(t).Seconds()))
	}
	took := time.Since(began)
	stop()
	wg.Wait()
	for _, c := range clients {
		c.CloseIdleConnections()
	}
	if err != nil {
		return err
	}
	at, kinds, _ := w.since()
	detail := fmt.Sprintf("%d GETs of /version at %d a second, spread over %d clusters, HTTP/2 on 6 connections to the replicas in rotation; the agents (the real agent package, one process for many) move make-before-break when their draining replica asks (test/e2e TestRollingUpdateFailsNoRequest: 3 agents behind HAProxy, 0 failed); %d waited out a Retry-After; %s; coordination writes meanwhile %d (%s)",
		requests.Load(), rps, len(list), waited.Load(), strings.Join(steps, "; "), len(at), kindsString(kinds))
	if len(failKinds) > 0 {
		type kind struct {
			why string
			n   int
		}
		var ks []kind
		for why, c := range failKinds {
			ks = append(ks, kind{why, c})
		}
		sort.Slice(ks, func(i, j int) bool { return ks[i].n > ks[j].n })
		var parts []string
		for _, k := range ks[:min(len(ks), 8)] {
			parts = append(parts, fmt.Sprintf("%d × %s", k.n, k.why))
		}
		detail += fmt.Sprintf("; failures by kind (the %d most of %d kinds): %s", min(len(ks), 8), len(ks), strings.Join(parts, "; "))
	}
	r.add(atMost(figure{Section: "replicas-fleet", Name: fmt.Sprintf("rolling update of %d replicas under %d requests/s: failed requests", n, rps), Value: float64(failures.Load()), Unit: "requests", Detail: detail}, 0))
	r.add(figure{Section: "replicas-fleet", Name: fmt.Sprintf("rolling update of %d replicas: seconds it took", n), Value: took.Seconds(), Unit: "s",
		Detail: "from the first SIGTERM until every cluster was Ready on every replica after the last one started again"})
	r.add(figure{Section: "replicas-fleet", Name: "rolling update: the slowest replica's exit after SIGTERM", Value: slowest.Seconds(), Unit: "s",
		Detail: fmt.Sprintf("with the chart's drain of %d s and grace of %d s; its pods' terminationGracePeriodSeconds, after which the kubelet kills a replica still stopping, is %d s", chartDrainDelay, chartShutdownGrace, chartTermination)})
	return nil
}

var digits = regexp.MustCompile(`[0-9]+`)

// statusMessage is the message of a Kubernetes Status in body, or the
// body's start.
func statusMessage(body []byte) string {
	var st struct{ Message string }
	if json.Unmarshal(body, &st) == nil && st.Message != "" {
		return st.Message
	}
	if len(body) > 200 {
		body = body[:200]
	}
	return strings.TrimSpace(string(body))
}
