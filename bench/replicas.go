package main

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/listfile"
	"github.com/tetherhq/tether/internal/localkube"
)

// The replicas part (issue 35, SPEC section 8): three hub replicas (`bench
// child hub`, which runs server.Serve from the same TETHER_* settings as
// `tether hub`) coordinated through a real kube-apiserver
// (TETHER_COORDINATION=kubernetes, a Lease each), sharing one certificate
// and one agents list. Figures: what forwarding a request to the replica
// holding the cluster's agent costs; a fleet spread over the replicas; a
// replica killed; a rolling update under load.

// The chart's drainDelaySeconds and shutdownGraceSeconds; its pods'
// terminationGracePeriodSeconds is their sum and 15 s, after which the
// kubelet kills a replica that is still stopping.
const (
	chartDrainDelay    = 10
	chartShutdownGrace = 30
	chartTermination   = chartDrainDelay + chartShutdownGrace + 15
)

// replicaOpts size the replicas part.
type replicaOpts struct {
	replicas  int           // how many replicas
	perHub    int           // simulated agents homed on each replica; 0: no fleet
	h2Gets    int           // small GETs over HTTP/2 on each path, one at a time
	lists     int           // rounds of each 21 MB list, the first a warm-up
	settle    time.Duration // how long the fleet rests before it is measured
	window    time.Duration // the at-rest window: CPU and coordination writes
	kill      bool          // kill a replica under the fleet
	rolling   bool          // then update all replicas in turn, under requests
	rollingRP int           // requests a second during the rolling update
}

// replicaBed is the API server, the replicas, and what starting one again
// takes.
type replicaBed struct {
	dir       string
	self      string
	cluster   *localkube.Cluster
	files     hubFiles
	userToken string
	addrs     []string   // each replica's public address
	metrics   []string   // each replica's /metrics address
	envs      [][]string // each replica's settings
	hubs      []*child
	starts    []int // how many times each was started, for its log's name
	agentEnv  []string
}

// startReplicaBed starts the API server (with the bench's objects, for the
// real agent of cluster "bench"), and n replicas whose agents list holds
// "bench" and the simulated agents 0 to fleetN-1.
func startReplicaBed(ctx context.Context, dir string, n, fleetN int) (*replicaBed, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	cluster, err := localkube.Start(ctx, localkube.Config{TempDir: dir})
	if err != nil {
		return nil, fmt.Errorf("start the API server: %w", err)
	}
	b := &replicaBed{dir: dir, cluster: cluster}
	b.self, _ = os.Executable()
	if err := prepareCluster(ctx, cluster); err != nil {
		b.close()
		return nil, err
	}
	const ns = "tether-bench-replicas"
	if err := cluster.Do(ctx, "POST", "/api/v1/namespaces", map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}}, nil); err != nil {
		b.close()
		return nil, err
	}
	if b.files, err = writeHubCert(dir); err != nil {
		b.close()
		return nil, err
	}
	keyFile := filepath.Join(dir, "signing-key.pem")
	if err := writeSigningKey(keyFile); err != nil {
		b.close()
		return nil, err
	}
	agentTok, _ := fleet.NewToken()
	b.userToken, _ = fleet.NewToken()
	var list strings.Builder
	list.WriteString(fleet.AgentsEntry("bench", listfile.TokenSHA256(agentTok)))
	for i := range fleetN {
		fmt.Fprintf(&list, "- name: %s\n  tokenSha256: %s\n", agentName(i), listfile.TokenSHA256(agentToken(i)))
	}
	listFile := filepath.Join(dir, "agents.yaml")
	if err := os.WriteFile(listFile, []byte(list.String()), 0o600); err != nil {
		b.close()
		return nil, err
	}
	users := fmt.Sprintf("- name: %s\n  tokenSha256: %s\n  groups: [%q]\n", benchUser, listfile.TokenSHA256(b.userToken), benchGroup)
	for i := range n {
		addr, err := freePort()
		if err != nil {
			b.close()
			return nil, err
		}
		peer, err := freePort()
		if err != nil {
			b.close()
			return nil, err
		}
		metrics, err := freePort()
		if err != nil {
			b.close()
			return nil, err
		}
		hubDir := filepath.Join(dir, fmt.Sprintf("hub-%d", i))
		os.MkdirAll(hubDir, 0o755)
		env := append(benchHubEnv(addr, b.files, hubDir, "TETHER_FLEET_AGENTS_FILE="+listFile, users),
			"TETHER_TOKEN_SIGNING_KEY_FILE="+keyFile,
			"TETHER_COORDINATION=kubernetes", "TETHER_COORDINATION_NAMESPACE="+ns,
			fmt.Sprintf("TETHER_REPLICA_NAME=hub-%d", i), "TETHER_PEER_ADDR="+peer, "TETHER_PEER_LISTEN_ADDR="+peer,
			"KUBECONFIG="+cluster.AdminKubeconfig, "TETHER_METRICS_ADDR="+metrics,
			// As the chart sets them: the drain while endpoints follow
			// the failing /readyz, then the open requests' grace.
			fmt.Sprintf("TETHER_DRAIN_DELAY_SECONDS=%d", chartDrainDelay), fmt.Sprintf("TETHER_SHUTDOWN_GRACE_SECONDS=%d", chartShutdownGrace))
		b.addrs = append(b.addrs, addr)
		b.metrics = append(b.metrics, metrics)
		b.envs = append(b.envs, env)
		b.hubs = append(b.hubs, nil)
		b.starts = append(b.starts, 0)
	}
	// The replicas start together, as a Deployment's pods do.
	errs := make(chan error, n)
	for i := range n {
		go func() { errs <- b.start(ctx, i) }()
	}
	for range n {
		if e := <-errs; e != nil && err == nil {
			err = e
		}
	}
	if err != nil {
		b.close()
		return nil, err
	}
	b.agentEnv = []string{
		"TETHER_HUB_URL=https://" + b.addrs[0], "TETHER_AGENT_NAME=bench", "TETHER_AGENT_TOKEN=" + agentTok,
		"TETHER_HUB_CA=" + b.files.caFile, "TETHER_HEALTH_ADDR=0", "TETHER_SERVICEACCOUNT_DIR=" + cluster.ServiceAccountDir,
		"KUBERNETES_SERVICE_HOST=" + cluster.Host, "KUBERNETES_SERVICE_PORT=" + cluster.Port,
	}
	return b, nil
}

// start starts replica i (again), as a Deployment's new pod would.
func (b *replicaBed) start(ctx context.Context, i int) error {
	b.starts[i]++
	h, err := startChild(ctx, fmt.Sprintf("hub-%d", i), []string{b.self, "child", "hub"}, b.envs[i], b.hubLog(i), true)
	if err != nil {
		return err
	}
	b.hubs[i] = h
	return nil
}

func (b *replicaBed) hubLog(i int) string {
	return filepath.Join(b.dir, fmt.Sprintf("hub-%d-%d.log", i, b.starts[i]))
}

func (b *replicaBed) close() {
	for _, h := range b.hubs {
		if h != nil {
			h.stop(30 * time.Second)
		}
	}
	b.cluster.Close()
}

func (b *replicaBed) stats(i int) (hubStats, error) {
	var s hubStats
	err := getJSON("http://"+b.hubs[i].ready[1]+"/stats", &s)
	return s, err
}

// held is how many agents replica i holds: its tether_agents_connected.
func (b *replicaBed) held(i int) (int, error) {
	resp, err := http.Get("http://" + b.metrics[i] + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "tether_agents_connected "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return int(f), err
		}
	}
	return 0, fmt.Errorf("replica %d's /metrics has no tether_agents_connected", i)
}

// writeSigningKey writes a new Ed25519 key, as the chart's Secret holds
// the replicas' TETHER_TOKEN_SIGNING_KEY_FILE.
func writeSigningKey(path string) error {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
}

// readyCount is how many clusters replica i shows Ready (n), or why its
// event stream ended (err).
type readyCount struct {
	i, n int
	err  error
}

// readyOn follows replica i's /api/events, as an open fleet page does,
// and sends on counts how many of names it shows Ready each time that
// changes, until ctx ends or the stream does. A fresh stream starts with
// every cluster, so each one starts the count again. Following the stream
// costs the replica an event a change; polling /api/clusters four times a
// second cost it a list of the whole fleet each time, which at 15,000
// clusters took CPU the replicas taking agents back needed.
func (b *replicaBed) readyOn(ctx context.Context, c *http.Client, i int, names map[string]bool, counts chan<- readyCount) error {
	req, _ := http.NewRequestWithContext(ctx, "GET", "https://"+b.addrs[i]+"/api/events", nil)
	req.Header.Set("Authorization", "Bearer "+b.userToken)
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("GET /api/events: %s", resp.Status)
	}
	ready := map[string]bool{}
	n := -1
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var e struct{ Name, Status string }
		if json.Unmarshal([]byte(data), &e) != nil || !names[e.Name] {
			continue
		}
		// A "removed" event has no status: not Ready.
		if e.Status == "Ready" {
			ready[e.Name] = true
		} else {
			delete(ready, e.Name)
		}
		if len(ready) != n {
			n = len(ready)
			select {
			case counts <- readyCount{i: i, n: n}:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return errors.New("the event stream ended")
}

// waitReady waits until every replica but skip shows every one of names
// Ready, and returns when it first saw them so. It follows each replica's
// event stream, opening it again if it breaks (a replica restarting).
func (b *replicaBed) waitReady(ctx context.Context, skip int, names map[string]bool, limit time.Duration) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: b.files.pool.Clone()}}
	defer c.CloseIdleConnections()
	updates := make(chan readyCount)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel() // before the wait: the followers end with ctx
	seen := map[int]int{}
	errs := map[int]error{}
	for i := range b.hubs {
		if i == skip {
			continue
		}
		seen[i] = 0
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				err := b.readyOn(ctx, c, i, names, updates)
				select {
				case updates <- readyCount{i: i, n: 0, err: err}:
				case <-ctx.Done():
					return
				}
				select {
				case <-time.After(250 * time.Millisecond):
				case <-ctx.Done():
				}
			}
		}()
	}
	for {
		select {
		case u := <-updates:
			seen[u.i] = u.n
			if u.err != nil {
				errs[u.i] = u.err
				continue
			}
			delete(errs, u.i)
			all := true
			for _, n := range seen {
				all = all && n == len(names)
			}
			if all {
				return time.Now(), nil
			}
		case <-ctx.Done():
			if err := context.Cause(ctx); !errors.Is(err, context.DeadlineExceeded) {
				return time.Time{}, err
			}
			// For a look after the run: what each replica was doing.
			for i, h := range b.hubs {
				if h != nil && i != skip {
					saveURL("http://"+h.ready[1]+"/debug/pprof/goroutine?debug=1", filepath.Join(b.dir, fmt.Sprintf("replica-goroutines-%d-%d.txt", i, b.starts[i])))
				}
			}
			var shown []string
			for i := range b.hubs {
				if n, ok := seen[i]; ok {
					s := fmt.Sprintf("replica %d: %d", i, n)
					if errs[i] != nil {
						s += fmt.Sprintf(" (%v)", errs[i])
					}
					shown = append(shown, s)
				}
			}
			return time.Time{}, fmt.Errorf("after %s the replicas show these of %d clusters Ready: %s", limit, len(names), strings.Join(shown, "; "))
		}
	}
}

// waitLog waits until replica i's log holds s.
func (b *replicaBed) waitLog(ctx context.Context, i int, s string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		if f, err := os.Open(b.hubLog(i)); err == nil {
			sc := bufio.NewScanner(f)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			for sc.Scan() {
				if strings.Contains(sc.Text(), s) {
					f.Close()
					return nil
				}
			}
			f.Close()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("replica %d logged no %q in %s", i, s, limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func benchReplicas(ctx context.Context, r *report, dir string, o replicaOpts) error {
	type built struct {
		bin string
		err error
	}
	os.MkdirAll(dir, 0o755)
	building := make(chan built, 1)
	go func() {
		bin, err := buildTether(ctx, dir)
		building <- built{bin, err}
	}()
	b, err := startReplicaBed(ctx, dir, o.replicas, o.replicas*o.perHub)
	bt := <-building
	if err != nil {
		return err
	}
	defer b.close()
	if bt.err != nil {
		return bt.err
	}
	if err := replicaForwarding(ctx, r, b, bt.bin, o); err != nil {
		return err
	}
	if o.perHub == 0 {
		return nil
	}
	return replicaFleet(ctx, r, b, o)
}

// replicaForwarding measures a request through a replica that forwards it
// to the replica holding the cluster's agent against the same request
// straight to the holder, over HTTP/2 as kubectl speaks it, alternated:
// the small GET one at a time, and the 21 MB list.
func replicaForwarding(ctx context.Context, r *report, b *replicaBed, bin string, o replicaOpts) error {
	// The real agent connects to replica 0, which holds "bench" from then.
	agentProc, err := startChild(ctx, "agent", []string{bin, "agent"}, b.agentEnv, filepath.Join(b.dir, "agent.log"), false)
	if err != nil {
		return err
	}
	defer agentProc.stop(10 * time.Second)
	// One HTTP hop: net/http's reverse proxy, alone, in front of the
	// holder (decision 041), beside the forwarding, which splices bytes.
	plain, err := startChild(ctx, "proxy", []string{b.self, "child", "proxy", "-target", b.addrs[0], "-ca", b.files.caFile, "-cert", b.files.cert, "-key", b.files.key},
		nil, filepath.Join(b.dir, "proxy.log"), true)
	if err != nil {
		return err
	}
	defer plain.stop(10 * time.Second)
	hdr := http.Header{"Authorization": {"Bearer " + b.userToken}}
	holder := &client{base: "https://" + b.addrs[0] + "/clusters/bench", tls: b.files.pool, header: hdr, h2: true}
	forwarder := &client{base: "https://" + b.addrs[1] + "/clusters/bench", tls: b.files.pool, header: hdr, h2: true}
	proxied := &client{base: "https://" + plain.ready[0] + "/clusters/bench", tls: b.files.pool, header: hdr, h2: true}
	clients := []*client{forwarder, holder, proxied}
	const small = "/api/v1/namespaces/" + benchNS + "/configmaps/small"
	deadline := time.Now().Add(time.Minute)
	for _, c := range clients {
		for {
			c.init(false)
			if _, err := c.get(ctx, small); err == nil {
				break
			} else if time.Now().After(deadline) {
				return fmt.Errorf("no answer from the cluster bench through %s in a minute: %w", c.base, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	defer func() {
		for _, c := range clients {
			c.c.CloseIdleConnections()
		}
	}()
	lat, err := oneAtATime(ctx, clients, o.h2Gets, small)
	if err != nil {
		return err
	}
	f50, h50, p50 := quantile(lat[0], 0.5), quantile(lat[1], 0.5), quantile(lat[2], 0.5)
	f99, h99 := quantile(lat[0], 0.99), quantile(lat[1], 0.99)
	r.add(atMost(figure{Section: "replicas", Name: "small GET over HTTP/2, p50, forwarding replica − holder", Value: f50 - h50, Unit: "ms",
		Detail: fmt.Sprintf("through replica 1, which forwards to replica 0, %.2f ms; straight to replica 0, which holds the agent, %.2f ms; p99 %.2f and %.2f ms; %d each, one at a time, alternated. One HTTP hop: through net/http's reverse proxy alone in front of replica 0 (HTTP/2 in, HTTP/1.1 with TLS out), %.2f ms, %+.2f ms", f50, h50, f99, h99, len(lat[0]), p50, p50-h50)}, 0.25))
	pair := clients[:2] // the lists: forwarded and straight
	const path = "/api/v1/namespaces/" + benchNS + "/configmaps"
	for _, noGzip := range []bool{false, true} {
		for _, c := range pair {
			c.init(noGzip)
		}
		var ratios, times [2][]float64
		var size int64
		for i := range o.lists {
			var got [2]float64
			for j := range pair {
				k := (i + j) % len(pair)
				t := time.Now()
				n, err := pair[k].get(ctx, path)
				if err != nil {
					return err
				}
				size = n
				got[k] = time.Since(t).Seconds() * 1000
			}
			if i == 0 {
				continue // warm-up
			}
			times[0], times[1] = append(times[0], got[0]), append(times[1], got[1])
			ratios[0] = append(ratios[0], got[1]/got[0]) // throughput: forwarded ÷ holder's
		}
		name := "21 MB list over HTTP/2, gzip (Go's default), throughput forwarded ÷ holder's"
		if noGzip {
			name = "21 MB list over HTTP/2, no gzip, throughput forwarded ÷ holder's"
		}
		r.add(atLeast(figure{Section: "replicas", Name: name, Value: median(ratios[0]), Unit: "×",
			Detail: fmt.Sprintf("through the forwarding replica %.0f ms, straight to the holder %.0f ms, %.1f MB decoded; ratio per round %s", median(times[0]), median(times[1]), float64(size)/1e6, spread(ratios[0]))}, 0.8))
	}
	return nil
}

// clientTLS is a TLS client configuration trusting the replicas' CA.
func (b *replicaBed) clientTLS() *tls.Config { return b.files.pool.Clone() }
