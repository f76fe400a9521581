package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/listfile"
	"github.com/tetherhq/tether/internal/localkube"
	"github.com/tetherhq/tether/internal/pki"
)

const (
	benchUser  = "bench-user"
	benchGroup = "tether:bench"
	benchNS    = "bench"
)

// buildTether builds the tether binary the agents run, as `make static`
// builds the image's: static, no cgo, trimmed paths, no symbol table. The
// agent's resident memory is mostly its binary's pages, so a plain `go
// build` (cgo's resolver links libc) measured 1.1 to 1.4 MiB more.
func buildTether(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "tether")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "github.com/tetherhq/tether/cmd/tether")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build ./cmd/tether : %w", err)
	}
	return bin, nil
}

func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// hubFiles are a hub's certificate, in files as TETHER_TLS_* name them.
type hubFiles struct {
	caFile, cert, key string
	pool              *tls.Config
}

func writeHubCert(dir string) (hubFiles, error) {
	ca, err := pki.NewCA("bench hub CA", 24*time.Hour)
	if err != nil {
		return hubFiles{}, err
	}
	cert, key, err := ca.Issue(pki.Leaf{CommonName: "hub", Hosts: []string{"127.0.0.1", "localhost"}})
	if err != nil {
		return hubFiles{}, err
	}
	f := hubFiles{caFile: filepath.Join(dir, "hub-ca.pem"), cert: filepath.Join(dir, "hub.crt"), key: filepath.Join(dir, "hub.key"),
		pool: &tls.Config{RootCAs: ca.Pool()}}
	for p, b := range map[string][]byte{f.caFile: ca.CertPEM, f.cert: cert, f.key: key} {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			return hubFiles{}, err
		}
	}
	return f, nil
}

// kubeOpts size the Kubernetes part.
type kubeOpts struct {
	gets      int           // alternated pairs of small GETs, one in flight
	blocks200 int           // alternated 2 s blocks at 200 requests a second
	lists     int           // alternated pairs of each list, the first a warm-up
	h2Gets    int           // the same small GETs over HTTP/2; 0: none
	h2Lists   int           // the same lists over HTTP/2; 0: none
	agentRest time.Duration // how long the agent rests before its RSS is read
}

func benchKube(ctx context.Context, r *report, dir string, o kubeOpts) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// Build the agent while the API server starts.
	type built struct {
		bin string
		err error
	}
	building := make(chan built, 1)
	go func() {
		bin, err := buildTether(ctx, dir)
		building <- built{bin, err}
	}()
	cluster, err := localkube.Start(ctx, localkube.Config{TempDir: dir})
	b := <-building
	if err != nil {
		return fmt.Errorf("start the API server: %w", err)
	}
	defer cluster.Close()
	if b.err != nil {
		return b.err
	}
	bin := b.bin
	bed, err := startHubBed(ctx, dir, cluster)
	if err != nil {
		return err
	}
	defer bed.proc.stop(10 * time.Second)
	hf, hubURL, userToken, agentEnv := bed.files, bed.url, bed.userToken, bed.agentEnv
	agentProc, err := startChild(ctx, "agent", []string{bin, "agent"}, agentEnv, filepath.Join(dir, "agent.log"), false)
	if err != nil {
		return err
	}
	defer agentProc.stop(10 * time.Second)

	through := &client{base: hubURL + "/clusters/bench", tls: hf.pool, header: http.Header{"Authorization": {"Bearer " + userToken}}}
	saToken, err := os.ReadFile(filepath.Join(cluster.ServiceAccountDir, "token"))
	if err != nil {
		return err
	}
	directHeader := http.Header{
		"Authorization":    {"Bearer " + strings.TrimSpace(string(saToken))},
		"Impersonate-User": {benchUser}, "Impersonate-Group": {benchGroup},
	}
	direct := &client{base: cluster.URL, tls: &tls.Config{RootCAs: pool(cluster.CAPEM)}, header: directHeader, requestID: true}
	// Wait for the agent, through the hub.
	deadline := time.Now().Add(time.Minute)
	for {
		through.init(false)
		if _, err := through.get(ctx, "/api/v1/namespaces/"+benchNS+"/configmaps/small"); err == nil {
			break
		} else if time.Now().After(deadline) {
			return fmt.Errorf("no answer through the hub in a minute: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The agent at rest: connected, and nothing asked of it for a while but
	// the hub's probes.
	time.Sleep(o.agentRest)
	agentRSS := float64(agentProc.rss()) / (1 << 20)
	r.add(atMost(figure{Section: "agent", Name: fmt.Sprintf("agent idle RSS (tether agent, connected, after %s at rest)", o.agentRest), Value: agentRSS, Unit: "MiB",
		Detail: "VmRSS of the real tether agent process (built as the image's), TLS to the hub, inventory running; " + statusFields(agentProc.pid(), "RssAnon", "RssFile")}, 20))

	relayed, relays, stopRelays, err := startRelays(ctx, dir, cluster.Host+":"+cluster.Port)
	if err != nil {
		return err
	}
	defer stopRelays()
	relayedClient := &client{base: "https://" + relayed, tls: direct.tls, header: directHeader, requestID: true}
	// The floor of any proxy that reads HTTP: net/http's reverse proxy
	// alone, TLS from the client and TLS to the API server, for the small
	// GET one at a time.
	caFile := filepath.Join(dir, "cluster-ca.pem")
	if err := os.WriteFile(caFile, cluster.CAPEM, 0o600); err != nil {
		return err
	}
	self, _ := os.Executable()
	plain, err := startChild(ctx, "proxy", []string{self, "child", "proxy", "-target", cluster.Host + ":" + cluster.Port, "-ca", caFile, "-cert", hf.cert, "-key", hf.key},
		nil, filepath.Join(dir, "proxy.log"), true)
	if err != nil {
		return err
	}
	defer plain.stop(5 * time.Second)
	proxied := &client{base: "https://" + plain.ready[0], tls: hf.pool, header: directHeader, requestID: true}
	clients := []*client{viaHub: through, viaDirect: direct, viaRelays: relayedClient, viaProxy: proxied}
	if err := smallGets(ctx, r, clients, o); err != nil {
		return err
	}
	if err := getCPU(ctx, r, clients[:viaProxy], o.gets, [][]*child{viaHub: {bed.proc, agentProc}, viaRelays: relays}); err != nil {
		return err
	}
	if err := bigLists(ctx, r, clients[:viaProxy], o.lists); err != nil {
		return err
	}
	if o.h2Gets > 0 {
		if err := kubeH2(ctx, r, clients, o.h2Gets, o.h2Lists); err != nil {
			return err
		}
	}
	time.Sleep(5 * time.Second)
	r.add(figure{Section: "agent", Name: "agent RSS after the Kubernetes tests, 5 s later", Value: float64(agentProc.rss()) / (1 << 20), Unit: "MiB",
		Detail: "the same process, after relaying the lists below"})
	return nil
}

// startRelays starts two relay processes in a chain in front of target and
// returns the first one's address, and the two.
func startRelays(ctx context.Context, dir, target string) (string, []*child, func(), error) {
	self, _ := os.Executable()
	var kids []*child
	stop := func() {
		for _, k := range kids {
			k.stop(5 * time.Second)
		}
	}
	for _, name := range []string{"relay-b", "relay-a"} {
		k, err := startChild(ctx, name, []string{self, "child", "relay", "-target", target}, nil, filepath.Join(dir, name+".log"), true)
		if err != nil {
			stop()
			return "", nil, nil, err
		}
		kids = append(kids, k)
		target = k.ready[0]
	}
	return target, kids, stop, nil
}

func pool(pem []byte) *x509Pool { return newPool(pem) }

// hubBed is a hub in front of a prepared API server, as the kube and
// agentrss parts run it: its URL, a user's token, its certificate files,
// its process, and the settings an agent needs to join it as "bench".
type hubBed struct {
	url       string
	userToken string
	files     hubFiles
	proc      *child
	agentEnv  []string
}

// startHubBed fills the cluster with the bench's objects and starts a hub
// (`bench child hub`) in front of it. The caller stops bed.proc.
func startHubBed(ctx context.Context, dir string, cluster *localkube.Cluster) (*hubBed, error) {
	if err := prepareCluster(ctx, cluster); err != nil {
		return nil, err
	}
	hf, err := writeHubCert(dir)
	if err != nil {
		return nil, err
	}
	agentToken, _ := fleet.NewToken()
	userToken, _ := fleet.NewToken()
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	self, _ := os.Executable()
	hubURL := "https://" + addr
	hubEnv := benchHubEnv(addr, hf, dir,
		"TETHER_FLEET_AGENTS="+fleet.AgentsEntry("bench", listfile.TokenSHA256(agentToken)),
		fmt.Sprintf("- name: %s\n  tokenSha256: %s\n  groups: [%q]\n", benchUser, listfile.TokenSHA256(userToken), benchGroup))
	proc, err := startChild(ctx, "hub", []string{self, "child", "hub"}, hubEnv, filepath.Join(dir, "hub.log"), true)
	if err != nil {
		return nil, err
	}
	return &hubBed{url: hubURL, userToken: userToken, files: hf, proc: proc, agentEnv: []string{
		"TETHER_HUB_URL=" + hubURL, "TETHER_AGENT_NAME=bench", "TETHER_AGENT_TOKEN=" + agentToken,
		"TETHER_HUB_CA=" + hf.caFile, "TETHER_HEALTH_ADDR=0", "TETHER_SERVICEACCOUNT_DIR=" + cluster.ServiceAccountDir,
		"KUBERNETES_SERVICE_HOST=" + cluster.Host, "KUBERNETES_SERVICE_PORT=" + cluster.Port,
	}}, nil
}

// benchHubEnv is the settings of a bench hub at addr: hf's certificate,
// the agents setting given, users as TETHER_USERS, its audit in dir, and
// no metrics port.
func benchHubEnv(addr string, hf hubFiles, dir, agents, users string) []string {
	return []string{
		"TETHER_ADDR=" + addr, "TETHER_PUBLIC_URL=https://" + addr,
		"TETHER_TLS_CERT_FILE=" + hf.cert, "TETHER_TLS_KEY_FILE=" + hf.key,
		agents, "TETHER_USERS=" + users,
		"TETHER_METRICS_ADDR=0", "TETHER_AUDIT_FILE=" + filepath.Join(dir, "audit.jsonl"),
	}
}

// prepareCluster lets the agent's service account read the inventory kinds
// (as the Helm chart does, so the agent at rest runs its inventory), binds
// the bench's group to cluster-admin and makes a small ConfigMap and 24 of
// about 900 KB.
func prepareCluster(ctx context.Context, c *localkube.Cluster) error {
	if err := c.GrantInventory(ctx, localkube.Namespace, localkube.ServiceAccount); err != nil {
		return err
	}
	binding := map[string]any{
		"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
		"metadata": map[string]any{"name": "bench-admins"},
		"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
		"subjects": []map[string]any{{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": benchGroup}},
	}
	if err := c.Do(ctx, "POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding, nil); err != nil {
		return err
	}
	if err := c.Do(ctx, "POST", "/api/v1/namespaces", map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": benchNS}}, nil); err != nil {
		return err
	}
	cm := func(name string, data map[string]string) error {
		return c.Do(ctx, "POST", "/api/v1/namespaces/"+benchNS+"/configmaps",
			map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": name}, "data": data}, nil)
	}
	if err := cm("small", map[string]string{"a": "b"}); err != nil {
		return err
	}
	for i := range 24 {
		// Random bytes in base64: about as compressible as the certificates
		// and manifests big ConfigMaps hold.
		raw := make([]byte, 900_000*3/4)
		rand.Read(raw)
		if err := cm(fmt.Sprintf("big-%02d", i), map[string]string{"data": base64.StdEncoding.EncodeToString(raw)}); err != nil {
			return err
		}
	}
	return nil
}

// client sends GETs to one base URL with fixed headers.
type client struct {
	base      string
	tls       *tls.Config
	header    http.Header
	requestID bool // add a fresh Impersonate-Extra-Tether-Request-Id, as the hub does
	h2        bool // speak HTTP/2, as kubectl and client-go do, and insist on it
	c         *http.Client
}

func (c *client) init(noGzip bool) {
	if c.c != nil {
		c.c.CloseIdleConnections()
	}
	c.c = &http.Client{Transport: &http.Transport{TLSClientConfig: c.tls.Clone(), MaxIdleConnsPerHost: 256, DisableCompression: noGzip, ForceAttemptHTTP2: c.h2}}
}

// get returns the body's length, after reading all of it.
func (c *client) get(ctx context.Context, path string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", c.base+path, nil)
	if err != nil {
		return 0, err
	}
	for k, v := range c.header {
		req.Header[k] = v
	}
	if c.requestID {
		var b [16]byte
		rand.Read(b[:])
		req.Header.Set("Impersonate-Extra-Tether-Request-Id", hex.EncodeToString(b[:]))
	}
	resp, err := c.c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		return n, err
	}
	if c.h2 && resp.ProtoMajor != 2 {
		return n, fmt.Errorf("GET %s: answered in %s, not HTTP/2", path, resp.Proto)
	}
	if resp.StatusCode != 200 {
		return n, fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return n, nil
}

// The paths a Kubernetes request takes in this part, alternated request by
// request: through the hub, straight to the API server, and through two
// relay processes that only copy bytes, with TLS from the client to the API
// server as direct: what crossing two more processes costs on this machine
// before a hub or agent does any work.
const (
	viaHub = iota
	viaDirect
	viaRelays
	// viaProxy, net/http's reverse proxy alone in front of the API
	// server, is only in the small GET one at a time: the floor of a hop
	// that reads HTTP, with TLS on both sides, as the hub's does.
	viaProxy
)

func smallGets(ctx context.Context, r *report, clients []*client, o kubeOpts) error {
	const path = "/api/v1/namespaces/" + benchNS + "/configmaps/small"
	for _, c := range clients {
		c.init(false)
	}
	lat, err := oneAtATime(ctx, clients, o.gets, path)
	if err != nil {
		return err
	}
	addGet(r, "kube", "small GET, 1 in flight", lat, http1Budget)
	// 200 requests a second, open loop, alternating in 2 s blocks.
	clients = clients[:viaProxy]
	lat = make([][]float64, len(clients))
	var errs int
	for block := range o.blocks200 {
		k := block % len(clients)
		var mu sync.Mutex
		var wg sync.WaitGroup
		tick := time.NewTicker(5 * time.Millisecond)
		for range 400 {
			<-tick.C
			wg.Add(1)
			go func() {
				defer wg.Done()
				t := time.Now()
				_, err := clients[k].get(ctx, path)
				d := float64(time.Since(t).Microseconds()) / 1000
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs++
					return
				}
				lat[k] = append(lat[k], d)
			}()
		}
		tick.Stop()
		wg.Wait()
	}
	if errs > 0 {
		return fmt.Errorf("%d small GETs failed at 200/s", errs)
	}
	addGet(r, "kube", "small GET, 200 req/s", lat, nil)
	return nil
}

// oneAtATime sends n GETs of path on each client, one in flight,
// alternating request by request, and returns each client's latencies in
// ms after the first 100 rounds' warm-up.
func oneAtATime(ctx context.Context, clients []*client, n int, path string) ([][]float64, error) {
	lat := make([][]float64, len(clients))
	for i := range n {
		for j := range clients {
			k := (i + j) % len(clients)
			t := time.Now()
			if _, err := clients[k].get(ctx, path); err != nil {
				return nil, err
			}
			if i >= 100 || n <= 100 { // warm-up
				lat[k] = append(lat[k], float64(time.Since(t).Microseconds())/1000)
			}
		}
	}
	return lat, nil
}

// getCPU sends small GETs one at a time through the hub and through the two
// relays, in alternated blocks of one path's requests, and reports the CPU
// time the processes of each path spent per request: the hub's and the
// agent's work beyond the copying of bytes the relays do. procs holds, by
// path, the processes whose CPU counts.
func getCPU(ctx context.Context, r *report, clients []*client, n int, procs [][]*child) error {
	const path = "/api/v1/namespaces/" + benchNS + "/configmaps/small"
	const blocks = 4
	spent := make([][]time.Duration, len(procs))
	for k := range procs {
		spent[k] = make([]time.Duration, len(procs[k]))
	}
	reqs := make([]int, len(procs))
	for b := range blocks {
		for j := range procs {
			k := (j + b) % len(procs) // the order rotates each block
			if len(procs[k]) == 0 {
				continue
			}
			before := make([]time.Duration, len(procs[k]))
			for i, p := range procs[k] {
				before[i] = p.cpu()
			}
			for range n / blocks {
				if _, err := clients[k].get(ctx, path); err != nil {
					return err
				}
			}
			for i, p := range procs[k] {
				spent[k][i] += p.cpu() - before[i]
			}
			reqs[k] += n / blocks
		}
	}
	per := func(k, i int) float64 { return float64(spent[k][i].Microseconds()) / float64(reqs[k]) }
	hub, agent := per(viaHub, 0), per(viaHub, 1)
	relays := per(viaRelays, 0) + per(viaRelays, 1)
	r.add(figure{Section: "kube", Name: "small GET, CPU per request, hub + agent", Value: hub + agent, Unit: "µs",
		Detail: fmt.Sprintf("hub %.0f µs, agent %.0f µs; the two relays %.0f µs; %d requests each, one at a time, in %d alternated blocks (CPU read from /proc in 10 ms ticks)",
			hub, agent, relays, reqs[viaHub], blocks)})
	return nil
}

// getBudget sets the budgets of a small GET's p50 and p99 figures, given
// the two relays' added time at p50 and their ratio to direct at p99.
type getBudget func(p50, p99 figure, relaysAdded, relaysRatio float64) (figure, figure)

// http1Budget: p50 added within the relays' + 0.30 ms, p99 within their
// ratio × 1.15.
func http1Budget(f, g figure, added, ratio float64) (figure, figure) {
	return atMostPlus(f, added, 0.30, "two relays'"), atMostTimes(g, ratio, 1.15, "two relays'")
}

// addGet adds a small GET's p50 and p99 figures from lat, by path, with
// budget's budgets unless it is nil.
func addGet(r *report, section, name string, lat [][]float64, budget getBudget) {
	t50, d50, r50 := quantile(lat[viaHub], 0.5), quantile(lat[viaDirect], 0.5), quantile(lat[viaRelays], 0.5)
	t99, d99, r99 := quantile(lat[viaHub], 0.99), quantile(lat[viaDirect], 0.99), quantile(lat[viaRelays], 0.99)
	f := figure{Section: section, Name: name + ", p50, hub − direct", Value: t50 - d50, Unit: "ms",
		Detail: fmt.Sprintf("hub %.2f ms, direct %.2f ms (%.2f×), two relays %.2f ms (%+.2f); %d each", t50, d50, t50/d50, r50, r50-d50, len(lat[viaHub]))}
	if len(lat) > viaProxy {
		p50 := quantile(lat[viaProxy], 0.5)
		f.Detail += fmt.Sprintf("; net/http's reverse proxy alone %.2f ms (%+.2f)", p50, p50-d50)
	}
	g := figure{Section: section, Name: name + ", p99, hub ÷ direct", Value: t99 / d99, Unit: "×",
		Detail: fmt.Sprintf("hub %.2f ms, direct %.2f ms, two relays %.2f ms (%.2f×)", t99, d99, r99, r99/d99)}
	if budget != nil {
		f, g = budget(f, g, r50-d50, r99/d99)
	}
	r.add(f)
	r.add(g)
}

func bigLists(ctx context.Context, r *report, clients []*client, pairs int) error {
	for _, noGzip := range []bool{false, true} {
		l, err := listPairs(ctx, clients, pairs, noGzip)
		if err != nil {
			return err
		}
		name := "21 MB list, gzip (Go's default), hub ÷ direct"
		if noGzip {
			name = "21 MB list, no gzip, hub ÷ direct"
		}
		r.add(atMostTimes(figure{Section: "kube", Name: name, Value: median(l.ratios), Unit: "×", Detail: l.detail()}, median(l.relayRatios), 1.10, "two relays'"))
	}
	return nil
}

// lists is what listPairs measured: each path's times in ms, the hub's and
// the two relays' ratios to direct per round, and the list's decoded size.
type lists struct {
	times               [][]float64
	ratios, relayRatios []float64
	size                int64
}

func (l lists) detail() string {
	return fmt.Sprintf("hub %.0f ms, direct %.0f ms, two relays %.0f ms (%.2f×), %.1f MB decoded; ratio per pair %s",
		median(l.times[viaHub]), median(l.times[viaDirect]), median(l.times[viaRelays]), median(l.relayRatios), float64(l.size)/1e6, spread(l.ratios))
}

// listPairs lists the bench's 24 big ConfigMaps on each client in turn,
// pairs rounds after a warm-up one, the order rotating each round.
func listPairs(ctx context.Context, clients []*client, pairs int, noGzip bool) (lists, error) {
	const path = "/api/v1/namespaces/" + benchNS + "/configmaps"
	for _, c := range clients {
		c.init(noGzip)
	}
	l := lists{times: make([][]float64, len(clients))}
	for i := range pairs {
		got := make([]float64, len(clients))
		for j := range clients {
			k := (i + j) % len(clients)
			t := time.Now()
			n, err := clients[k].get(ctx, path)
			if err != nil {
				return l, err
			}
			l.size = n
			got[k] = time.Since(t).Seconds() * 1000
		}
		if i == 0 {
			continue // warm-up: connections, and the API server's cache
		}
		for k := range got {
			l.times[k] = append(l.times[k], got[k])
		}
		l.ratios = append(l.ratios, got[viaHub]/got[viaDirect])
		l.relayRatios = append(l.relayRatios, got[viaRelays]/got[viaDirect])
	}
	return l, nil
}
