// Command inventory measures the inventory at scale (issue budgets): with
// N pods, and by default 20,000 ReplicaSets and 1,000 Argo Workflows (issue
// 36), in a real API server, the real agent's resident memory, the memory
// the hub's state of the cluster takes, and how long the first snapshot
// takes to reach the hub: with the pods alone (issue 5's budget is for
// them), then with everything.
//
// The hub runs in this process, so its heap can be read before and after
// the snapshot; the agent is the real tether binary, a process of its own,
// whose RSS is read from /proc. Run it with `make bench-inventory`.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/listfile"
	"github.com/tetherhq/tether/internal/localkube"
	"github.com/tetherhq/tether/internal/server"
)

// Result is what one run measured; the JSON goes to -out.
type Result struct {
	Date        string `json:"date"`
	GoVersion   string `json:"goVersion"`
	Pods        int    `json:"pods"`
	PodBytes    int    `json:"podBytes"` // JSON size of one pod as created
	ReplicaSets int    `json:"replicaSets,omitempty"`
	Workflows   int    `json:"workflows,omitempty"`
	// WorkflowBytes is the JSON size of the Workflows together: most are
	// small, one in 50 holds a status of a megabyte, as a long run's does.
	WorkflowBytes int `json:"workflowBytes,omitempty"`
	// SnapshotSeconds is the snapshot at issue 5's scale, the pods alone:
	// its budget's. FullSnapshotSeconds is the snapshot of everything,
	// with the time client-go takes to list it all straight beside it.
	SnapshotSeconds       float64 `json:"snapshotSeconds"`
	DirectListSeconds     float64 `json:"directListSeconds"` // one client-go List of the same pods, for scale
	FullSnapshotSeconds   float64 `json:"fullSnapshotSeconds"`
	DirectFullListSeconds float64 `json:"directFullListSeconds"`
	// ReconnectSnapshotSeconds is the snapshot after a hub restart: the
	// agent's watches are warm, as for any agent running for a while.
	ReconnectSnapshotSeconds float64 `json:"reconnectSnapshotSeconds"`
	AgentPeakRSSMiB          float64 `json:"agentPeakRssMiB"`
	AgentRSSMiB              float64 `json:"agentRssMiB"` // after the snapshot, settled
	// AgentPeakAnonMiB and AgentPeakFileMiB split the highest RSS seen by
	// sampling /proc every 10 ms: the heap's pages and the binary's. The
	// file pages vary with the binary's size and how the page cache holds
	// it (decision 028); the heap's are what the memory limit bounds.
	AgentPeakAnonMiB  float64 `json:"agentPeakAnonMiB"`
	AgentPeakFileMiB  float64 `json:"agentPeakFileMiB"`
	HubClusterHeapMiB float64 `json:"hubClusterHeapMiB"`
	Budgets           struct {
		SnapshotSeconds, AgentRSSMiB, HubClusterHeapMiB float64
	} `json:"budgets"`
	Pass bool `json:"pass"`
}

func main() {
	var sc scale
	flag.IntVar(&sc.pods, "pods", 10000, "pods to create in the test API server")
	flag.IntVar(&sc.replicaSets, "replicasets", 20000, "ReplicaSets to create")
	flag.IntVar(&sc.workflows, "workflows", 1000, "Argo Workflows to create (their CRD too)")
	out := flag.String("out", "bench/inventory-results.json", "where the JSON results go")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	res, err := run(context.Background(), log, sc)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench inventory:", err)
		os.Exit(1)
	}
	b, _ := json.MarshalIndent(res, "", "  ")
	if err := os.WriteFile(*out, append(b, '\n'), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("%s\n", b)
	if !res.Pass {
		os.Exit(1)
	}
}

// scale is how many objects of each kind the bench makes.
type scale struct{ pods, replicaSets, workflows int }

func run(ctx context.Context, log *slog.Logger, sc scale) (*Result, error) {
	n := sc.pods
	res := &Result{Date: time.Now().UTC().Format(time.RFC3339), GoVersion: runtime.Version(), Pods: n, ReplicaSets: sc.replicaSets, Workflows: sc.workflows}
	res.Budgets.SnapshotSeconds, res.Budgets.AgentRSSMiB, res.Budgets.HubClusterHeapMiB = 10, 100, 40

	dir, err := os.MkdirTemp("", "tether-bench-inventory-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "tether")
	build := exec.Command("go", "build", "-o", bin, "./cmd/tether")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return nil, fmt.Errorf("build tether: %w", err)
	}

	log.Info("starting the test API server")
	cluster, err := localkube.Start(ctx, localkube.Config{Logger: log.With("component", "localkube")})
	if err != nil {
		return nil, err
	}
	defer cluster.Close()
	if err := cluster.GrantInventory(ctx, localkube.Namespace, localkube.ServiceAccount); err != nil {
		return nil, err
	}
	log.Info("creating pods", "pods", n)
	start := time.Now()
	if res.PodBytes, err = createPods(ctx, cluster, n); err != nil {
		return nil, err
	}
	log.Info("created pods", "pods", n, "in", time.Since(start).Round(time.Second))
	// The baseline: the same pods listed straight, by one client-go List.
	if res.DirectListSeconds, err = directList(ctx, cluster, podsGVR); err != nil {
		return nil, err
	}
	log.Info("listed the pods straight", "seconds", res.DirectListSeconds)

	// The snapshot's budget is issue 5's, for 10,000 pods: a hub and a
	// fresh agent with the pods alone.
	b := &bed{bin: bin, cluster: cluster, pods: n}
	if err := b.startHub(ctx, ""); err != nil {
		return nil, err
	}
	err = b.startAgent()
	if err == nil {
		res.SnapshotSeconds, err = b.snapshot(1)
	}
	b.stop()
	if err != nil {
		return nil, err
	}
	log.Info("snapshot of the pods", "seconds", res.SnapshotSeconds)

	start = time.Now()
	if err := createAll(ctx, cluster, sc.replicaSets, func(ns string, i int) (string, map[string]any) {
		return "/apis/apps/v1/namespaces/" + ns + "/replicasets", replicaSet(ns, i)
	}); err != nil {
		return nil, err
	}
	log.Info("created ReplicaSets", "replicaSets", sc.replicaSets, "in", time.Since(start).Round(time.Second))
	full := []schema.GroupVersionResource{podsGVR, {Group: "apps", Version: "v1", Resource: "replicasets"}}
	if sc.workflows > 0 {
		start = time.Now()
		if res.WorkflowBytes, err = createWorkflows(ctx, cluster, sc.workflows); err != nil {
			return nil, err
		}
		log.Info("created Workflows", "workflows", sc.workflows, "bytes", res.WorkflowBytes, "in", time.Since(start).Round(time.Second))
		full = append(full, schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "workflows"})
	}
	if res.DirectFullListSeconds, err = directList(ctx, cluster, full...); err != nil {
		return nil, err
	}
	log.Info("listed everything straight", "seconds", res.DirectFullListSeconds)

	// Everything: a new hub, its heap read before the agent connects, and
	// a fresh agent, whose memory is issue 36's budget.
	before := heapInUse()
	if err := b.startHub(ctx, ""); err != nil {
		return nil, err
	}
	defer b.stop()
	if err := b.startAgent(); err != nil {
		return nil, err
	}
	peak := sampleRSS(b.agent.Process.Pid)
	if res.FullSnapshotSeconds, err = b.snapshot(1); err != nil {
		peak()
		return nil, err
	}
	time.Sleep(3 * time.Second) // let the agent settle
	res.AgentPeakAnonMiB, res.AgentPeakFileMiB = peak()
	pid := b.agent.Process.Pid
	res.AgentRSSMiB = round(procStatusMiB(pid, "VmRSS"))
	res.AgentPeakRSSMiB = round(procStatusMiB(pid, "VmHWM"))
	res.HubClusterHeapMiB = round(float64(heapInUse()-before) / (1 << 20))

	// After a hub restart, the agent has it all already.
	b.stopHub()
	if err := b.startHub(ctx, b.addr); err != nil {
		return nil, err
	}
	if res.ReconnectSnapshotSeconds, err = b.snapshot(2); err != nil {
		return nil, err
	}
	log.Info("done", "agentLog", b.agentLog.String())
	res.Pass = res.SnapshotSeconds < res.Budgets.SnapshotSeconds && res.ReconnectSnapshotSeconds < res.Budgets.SnapshotSeconds && res.AgentPeakRSSMiB < res.Budgets.AgentRSSMiB && res.HubClusterHeapMiB < res.Budgets.HubClusterHeapMiB
	return res, nil
}

// The bench's agent token and person token.
const (
	agentToken  = "bench-agent-token-0123456789abcdef0123456789abcdef"
	personToken = "bench-person-token-0123456789abcdef0123456789ab"
)

// bed is a hub in this process and the real agent as a process of its own.
type bed struct {
	bin     string
	cluster *localkube.Cluster
	pods    int

	addr     string // the hub's, kept across a restart
	stopHub  func()
	agent    *exec.Cmd
	agentLog *lineWatcher
}

// startHub starts a hub on addr, or on a new port when addr is "".
func (b *bed) startHub(ctx context.Context, addr string) error {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	b.addr = ln.Addr().String()
	b.stopHub = serveHub(ctx, ln, agentToken, personToken)
	return nil
}

// startAgent starts a new agent process, which lists the cluster first.
func (b *bed) startAgent() error {
	agent := exec.Command(b.bin, "agent")
	agent.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"TETHER_HUB_URL=http://" + b.addr, "TETHER_AGENT_NAME=bench", "TETHER_AGENT_TOKEN=" + agentToken,
		"TETHER_HEALTH_ADDR=0", "TETHER_SERVICEACCOUNT_DIR=" + b.cluster.ServiceAccountDir,
		"KUBERNETES_SERVICE_HOST=" + b.cluster.Host, "KUBERNETES_SERVICE_PORT=" + b.cluster.Port,
	}
	// BENCH_AGENT_GODEBUG reaches the agent as GODEBUG: gctrace=1 says
	// what its heap holds at each collection.
	if v := os.Getenv("BENCH_AGENT_GODEBUG"); v != "" {
		agent.Env = append(agent.Env, "GODEBUG="+v)
	}
	b.agentLog = &lineWatcher{}
	agent.Stdout, agent.Stderr = b.agentLog, b.agentLog
	agent.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := agent.Start(); err != nil {
		return err
	}
	b.agent = agent
	return nil
}

// stop stops the agent and the hub.
func (b *bed) stop() {
	if b.agent != nil {
		b.agent.Process.Signal(syscall.SIGTERM)
		b.agent.Wait()
		b.agent = nil
	}
	if b.stopHub != nil {
		b.stopHub()
	}
}

// snapshot is the time from the agent's nth connection to the moment the
// hub counts every pod: a snapshot is swapped in whole, so the hub counts
// them once it has everything the agent sent.
func (b *bed) snapshot(connections int) (float64, error) {
	connected, err := b.agentLog.waitConnected(connections, 30*time.Second)
	if err != nil {
		return 0, fmt.Errorf("%w:\n%s", err, b.agentLog)
	}
	hubURL := "http://" + b.addr
	for {
		got, err := podsNotReady(hubURL, personToken)
		if err == nil && got == b.pods {
			return round(time.Since(connected).Seconds()), nil
		}
		if time.Since(connected) > 2*time.Minute {
			return 0, fmt.Errorf("the hub counts %d pods not ready after 2 minutes (%v); want %d", got, err, b.pods)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// serveHub runs a hub on ln, admitting the agent "bench" with agentToken
// and the person with personToken, until the returned func is called.
func serveHub(ctx context.Context, ln net.Listener, agentToken, personToken string) (stop func()) {
	pub, _ := url.Parse("http://" + ln.Addr().String())
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		server.Serve(ctx, server.Options{
			Listener: ln, Addr: ln.Addr().String(), PublicURL: pub, BasePath: "/",
			Heartbeat: 30 * time.Second, ReconnectSpread: time.Second, ShutdownGrace: time.Second,
			AuditFile: os.DevNull,
			Fleet:     fleet.Config{Agents: fleet.AgentsEntry("bench", listfile.TokenSHA256(agentToken))},
			Auth:      auth.Config{Users: fmt.Sprintf("- name: bench\n  token: %s\n  groups: [bench]\n", personToken)},
		}, slog.New(slog.DiscardHandler), nil)
	}()
	var once sync.Once
	return func() { once.Do(func() { cancel(); <-done }) }
}

// benchNamespaces are the namespaces the objects are spread over.
const benchNamespaces = 20

// createPods creates n pods over 20 namespaces, each like a small real
// pod: labels, an owner, two containers with env, ports, probes and
// resources. It returns one pod's JSON size.
func createPods(ctx context.Context, c *localkube.Cluster, n int) (int, error) {
	for i := range benchNamespaces {
		ns := map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": fmt.Sprintf("bench-%02d", i)}}
		if err := c.Do(ctx, "POST", "/api/v1/namespaces", ns, nil); err != nil && !isConflict(err) {
			return 0, err
		}
	}
	if err := createAll(ctx, c, n, func(ns string, i int) (string, map[string]any) {
		return "/api/v1/namespaces/" + ns + "/pods", pod(ns, i)
	}); err != nil {
		return 0, err
	}
	b, _ := json.Marshal(pod("bench-00", 0))
	return len(b), nil
}

// createAll creates n objects, object i in namespace bench-<i mod 20>
// at the path obj gives, 32 at a time.
func createAll(ctx context.Context, c *localkube.Cluster, n int, obj func(ns string, i int) (string, map[string]any)) error {
	return createAllBy(ctx, c, n, 32, obj)
}

// createAllBy is createAll, workers at a time. A 5xx (the test API
// server, on a shared machine, timing out a large object) is tried again.
func createAllBy(ctx context.Context, c *localkube.Cluster, n, workers int, obj func(ns string, i int) (string, map[string]any)) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				path, o := obj(fmt.Sprintf("bench-%02d", i%benchNamespaces), i)
				err := c.Do(ctx, "POST", path, o, nil)
				for try := 0; err != nil && serverError(err) && try < 3; try++ {
					err = c.Do(ctx, "POST", path, o, nil)
				}
				if err != nil && !isConflict(err) {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func serverError(err error) bool {
	var apiErr *localkube.APIError
	return errors.As(err, &apiErr) && apiErr.StatusCode >= 500
}

func isConflict(err error) bool {
	var apiErr *localkube.APIError
	return errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusConflict
}

func pod(ns string, i int) map[string]any {
	app := fmt.Sprintf("app-%d", i/50)
	container := func(name, image string, port int) map[string]any {
		return map[string]any{
			"name": name, "image": image,
			"ports": []any{map[string]any{"name": "http", "containerPort": port}},
			"env": []any{
				map[string]any{"name": "APP", "value": app},
				map[string]any{"name": "LOG_LEVEL", "value": "info"},
				map[string]any{"name": "POD_NAME", "valueFrom": map[string]any{"fieldRef": map[string]any{"fieldPath": "metadata.name"}}},
			},
			"resources":      map[string]any{"requests": map[string]any{"cpu": "100m", "memory": "128Mi"}, "limits": map[string]any{"memory": "256Mi"}},
			"readinessProbe": map[string]any{"httpGet": map[string]any{"path": "/readyz", "port": port}, "periodSeconds": 10},
		}
	}
	return map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{
			"name": fmt.Sprintf("%s-%06d", app, i), "namespace": ns,
			"labels":      map[string]any{"app": app, "tier": "backend", "pod-template-hash": strconv.Itoa(i % 97)},
			"annotations": map[string]any{"example.com/owner": "team-" + strconv.Itoa(i%7), "example.com/note": strings.Repeat("x", 200)},
		},
		"spec": map[string]any{
			"containers": []any{container("app", "registry.example.com/"+app+":1.2.3", 8080), container("sidecar", "registry.example.com/proxy:4.5.6", 15090)},
		},
	}
}

// directList times one List of every object of each kind, one kind after
// another, with client-go's dynamic client, as the admin.
func directList(ctx context.Context, c *localkube.Cluster, kinds ...schema.GroupVersionResource) (float64, error) {
	cfg := &rest.Config{Host: c.URL, BearerToken: c.AdminToken, TLSClientConfig: rest.TLSClientConfig{CAData: c.CAPEM}}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	for _, k := range kinds {
		if _, err := dyn.Resource(k).List(ctx, metav1.ListOptions{}); err != nil {
			return 0, err
		}
	}
	return round(time.Since(start).Seconds()), nil
}

var podsGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// podsNotReady reads the cluster's summary from the hub's API.
func podsNotReady(hubURL, token string) (int, error) {
	req, _ := http.NewRequest("GET", hubURL+"/api/clusters/bench", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var c struct {
		Summary struct{ PodsNotReady *int }
	}
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
		return 0, err
	}
	if c.Summary.PodsNotReady == nil {
		return 0, errors.New("no summary yet")
	}
	return *c.Summary.PodsNotReady, nil
}

// heapInUse returns the live heap after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	debug.FreeOSMemory()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// procStatusMiB reads a kB field of /proc/<pid>/status.
func procStatusMiB(pid int, field string) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
			return kb / 1024
		}
	}
	return -1
}

// sampleRSS reads pid's RssAnon and RssFile every 10 ms until the
// returned func is called, which returns the two at the highest sum seen.
func sampleRSS(pid int) (stop func() (anonMiB, fileMiB float64)) {
	done := make(chan struct{})
	var anon, file float64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			a, f := procStatusMiB(pid, "RssAnon"), procStatusMiB(pid, "RssFile")
			if a+f > anon+file {
				anon, file = a, f
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	var once sync.Once
	return func() (float64, float64) {
		once.Do(func() { close(done); wg.Wait() })
		return round(anon), round(file)
	}
}

func round(f float64) float64 { return float64(int(f*10+0.5)) / 10 }

// lineWatcher keeps the agent's output and notes when it connects.
type lineWatcher struct {
	mu        sync.Mutex
	buf       strings.Builder
	connected []time.Time
}

func (l *lineWatcher) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	for range strings.Count(string(p), "Connected to ") {
		l.connected = append(l.connected, time.Now())
	}
	return len(p), nil
}

// waitConnected waits for the agent's nth connection and returns its time.
func (l *lineWatcher) waitConnected(nth int, within time.Duration) (time.Time, error) {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		l.mu.Lock()
		if len(l.connected) >= nth {
			t := l.connected[nth-1]
			l.mu.Unlock()
			return t, nil
		}
		l.mu.Unlock()
		time.Sleep(10 * time.Millisecond)
	}
	return time.Time{}, fmt.Errorf("the agent did not connect a %d. time within %s", nth, within)
}

func (l *lineWatcher) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

var _ io.Writer = (*lineWatcher)(nil)
