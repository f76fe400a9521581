package watch_test

import (
	"context"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/inventory"
	hubstore "github.com/tetherhq/tether/internal/inventory/store"
	"github.com/tetherhq/tether/internal/inventory/watch"
	"github.com/tetherhq/tether/internal/localkube"
	"github.com/tetherhq/tether/internal/protocol"
	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/labels"
)

// The tests share one real API server: it takes seconds to start. It starts
// on the first test's call to apiServer, not in TestMain: a fuzz target's
// workers run TestMain too, and would each start one they never use.
var (
	clusterOnce sync.Once
	cluster     *localkube.Cluster
	clusterErr  error
)

// compactionInterval is how often the test API server compacts etcd.
const compactionInterval = 2 * time.Second

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	code := m.Run()
	if cluster != nil {
		if err := cluster.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "stop the test API server:", err)
		}
	}
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1")); err != nil {
			fmt.Fprintln(os.Stderr, "leaked goroutines:", err)
			return 1
		}
	}
	return code
}

// apiServer returns the shared API server, starting it the first time.
func apiServer(t *testing.T) *localkube.Cluster {
	t.Helper()
	clusterOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()
		cluster, clusterErr = localkube.Start(ctx, localkube.Config{
			Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
			// etcd's history is compacted every few seconds (a real cluster:
			// every 5 minutes), and cronjobs are watched from etcd itself, not
			// the API server's watch cache: a watch of cronjobs from an old
			// resourceVersion meets 410 Gone within a test's time.
			APIServerArgs: []string{"--etcd-compaction-interval=" + compactionInterval.String(), "--watch-cache-sizes=cronjobs.batch#0"},
		})
	})
	if clusterErr != nil {
		t.Fatalf("start the test API server: %v", clusterErr)
	}
	return cluster
}

// newTestWatcher returns a watch.Watcher acting as the service account whose
// pod directory is saDir.
func newTestWatcher(t *testing.T, saDir string, namespaces ...string) *watch.Watcher {
	t.Helper()
	w, err := watch.New(watch.Config{
		Host: apiServer(t).URL, CAFile: filepath.Join(saDir, "ca.crt"), TokenFile: filepath.Join(saDir, "token"),
		Namespaces: namespaces, Rediscover: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// feed runs w and streams it into a Receiver of store, as the agent and the
// hub do over the tunnel, until stop is called.
type feed struct {
	stop func()
	done chan struct{}

	written, largestWrite atomic.Int64 // bytes Stream wrote, and its largest write
}

func runWatcher(t *testing.T, w *watch.Watcher) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func stream(t *testing.T, w *watch.Watcher, store *hubstore.Store, cluster, tieBreaker string) *feed {
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	f := &feed{done: make(chan struct{})}
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		w.Stream(ctx, writeSizes{pw, f}, watch.StreamOptions{Batch: 50 * time.Millisecond, GatewayTieBreaker: tieBreaker})
		pw.Close()
	}()
	go func() {
		defer close(f.done)
		rcv := store.Receiver(cluster)
		for {
			u, err := protocol.ReadUpdate(pr)
			if err != nil {
				return
			}
			rcv.Apply(u, time.Now())
		}
	}()
	f.stop = func() { cancel(); pr.Close(); <-sent; <-f.done }
	t.Cleanup(f.stop)
	return f
}

// writeSizes passes writes on to w and counts them in f.
type writeSizes struct {
	w io.Writer
	f *feed
}

func (s writeSizes) Write(p []byte) (int, error) {
	n := int64(len(p))
	s.f.written.Add(n)
	for {
		old := s.f.largestWrite.Load()
		if n <= old || s.f.largestWrite.CompareAndSwap(old, n) {
			break
		}
	}
	return s.w.Write(p)
}

func allow(string, string) bool { return true }

// names lists "namespace/name" of kind in store, sorted.
func names(store *hubstore.Store, cluster, kind string) []string {
	items, _ := store.Select(cluster, hubstore.Query{Kind: kind}, allow)
	var out []string
	for _, it := range items {
		out = append(out, it.Namespace+"/"+it.Name)
	}
	return out
}

// eventually polls cond every 20 ms for up to within.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func pod(ns, name string, labels map[string]string) map[string]any {
	return map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": ns, "labels": labels},
		"spec":     map[string]any{"containers": []any{map[string]any{"name": "main", "image": "registry.example/app:1"}}},
	}
}

// unique returns name with a random suffix: the tests share one API server
// for the whole process, so with -count above 1 each run makes objects
// the runs before it did not. (Namespaces can't be deleted here: no
// namespace controller finalizes them.)
func unique(name string) string {
	return name + "-" + strings.ToLower(rand.Text()[:6])
}

func mustNamespace(t *testing.T, name string) {
	t.Helper()
	mustDo(t, "POST", "/api/v1/namespaces", map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": name}})
}

func mustDo(t *testing.T, method, path string, in any) {
	t.Helper()
	if err := apiServer(t).Do(t.Context(), method, path, in, nil); err != nil {
		t.Fatal(err)
	}
}

func TestChangesArriveAndNoGhostsAfterReconnect(t *testing.T) {
	ctx := t.Context()
	if err := apiServer(t).GrantInventory(ctx, localkube.Namespace, localkube.ServiceAccount); err != nil {
		t.Fatal(err)
	}
	ns := unique("inv-changes")
	mustNamespace(t, ns)
	w := newTestWatcher(t, apiServer(t).ServiceAccountDir)
	runWatcher(t, w)
	store := hubstore.New(hubstore.Config{})
	f := stream(t, w, store, "c1", "")

	pods := "/api/v1/namespaces/" + ns + "/pods"
	eventually(t, 10*time.Second, "the snapshot", func() bool { _, ok := store.Info("c1"); return ok })

	// Created, changed, deleted: each within 2 s.
	mustDo(t, "POST", pods, pod(ns, "web-1", map[string]string{"app": "web"}))
	start := time.Now()
	eventually(t, 2*time.Second, "a created pod", func() bool { return slices.Contains(names(store, "c1", "pods"), ns+"/web-1") })
	t.Logf("created pod seen after %s", time.Since(start).Round(time.Millisecond))

	mustDo(t, "PATCH", pods+"/web-1", map[string]any{"metadata": map[string]any{"labels": map[string]string{"app": "web", "tier": "front"}}})
	sel := mustSelector(t, "tier=front")
	eventually(t, 2*time.Second, "a changed label", func() bool {
		items, _ := store.Select("c1", hubstore.Query{Kind: "pods", Namespace: ns, Selector: sel}, allow)
		return len(items) == 1
	})
	mustDo(t, "DELETE", pods+"/web-1", nil)
	eventually(t, 2*time.Second, "a deleted pod", func() bool { return !slices.Contains(names(store, "c1", "pods"), ns+"/web-1") })

	// The agent goes away; meanwhile one pod is deleted and one created.
	mustDo(t, "POST", pods, pod(ns, "old", nil))
	eventually(t, 2*time.Second, "pod old", func() bool { return slices.Contains(names(store, "c1", "pods"), ns+"/old") })
	f.stop()
	mustDo(t, "DELETE", pods+"/old", nil)
	mustDo(t, "POST", pods, pod(ns, "new", nil))
	eventually(t, 2*time.Second, "the watcher to see both while nothing streams", func() bool {
		seen := namespaceOnly(w.Names("pods"), ns)
		return !slices.Contains(seen, ns+"/old") && slices.Contains(seen, ns+"/new")
	})
	if !slices.Contains(names(store, "c1", "pods"), ns+"/old") {
		t.Fatal("the store changed with no stream open")
	}
	stream(t, w, store, "c1", "")
	want := apiServerPods(t, ns)
	eventually(t, 5*time.Second, "the store to equal the API server after a reconnect", func() bool {
		return slices.Equal(namespaceOnly(names(store, "c1", "pods"), ns), want)
	})
	if !slices.Equal(want, []string{ns + "/new"}) {
		t.Fatalf("API server has %v", want)
	}
}

func mustSelector(t *testing.T, s string) labels.Selector {
	t.Helper()
	sel, err := labels.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return sel
}

func apiServerPods(t *testing.T, ns string) []string {
	t.Helper()
	var list struct {
		Items []struct {
			Metadata struct{ Name, Namespace string }
		}
	}
	if err := apiServer(t).Do(t.Context(), "GET", "/api/v1/namespaces/"+ns+"/pods", nil, &list); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range list.Items {
		out = append(out, p.Metadata.Namespace+"/"+p.Metadata.Name)
	}
	sort.Strings(out)
	return out
}

func namespaceOnly(list []string, ns string) []string {
	var out []string
	for _, s := range list {
		if strings.HasPrefix(s, ns+"/") {
			out = append(out, s)
		}
	}
	return out
}

func TestAllowedNamespacesLimitWhatIsSeen(t *testing.T) {
	ctx := t.Context()
	// A service account with Roles in team-a and team-b only: no
	// cluster-wide list of anything.
	saDir, err := apiServer(t).NewServiceAccountDir(ctx, "inv-limited", "agent")
	if err != nil {
		t.Fatal(err)
	}
	limA, limB, limC := unique("lim-a"), unique("lim-b"), unique("lim-c")
	if err := apiServer(t).GrantInventory(ctx, "inv-limited", "agent", limA, limB); err != nil {
		t.Fatal(err)
	}
	mustNamespace(t, limC)
	for _, ns := range []string{limA, limB, limC} {
		mustDo(t, "POST", "/api/v1/namespaces/"+ns+"/pods", pod(ns, "app", nil))
	}
	w := newTestWatcher(t, saDir, limA, limB)
	runWatcher(t, w)
	store := hubstore.New(hubstore.Config{})
	stream(t, w, store, "c2", "")
	eventually(t, 10*time.Second, "pods of lim-a and lim-b", func() bool {
		return slices.Equal(names(store, "c2", "pods"), []string{limA + "/app", limB + "/app"})
	})
	// A pod made later in lim-c never arrives; one in lim-b does.
	mustDo(t, "POST", "/api/v1/namespaces/"+limC+"/pods", pod(limC, "later", nil))
	mustDo(t, "POST", "/api/v1/namespaces/"+limB+"/pods", pod(limB, "later", nil))
	eventually(t, 2*time.Second, "the later pod of lim-b", func() bool {
		return slices.Contains(names(store, "c2", "pods"), limB+"/later")
	})
	for _, kind := range inventory.KindNames() {
		for _, n := range names(store, "c2", kind) {
			if strings.HasPrefix(n, limC+"/") || n == "/"+limC {
				t.Errorf("%s %s reached the hub", kind, n)
			}
		}
	}
	// Nodes are cluster-scoped and not permitted: reported, not watched.
	info, _ := store.Info("c2")
	var nodeErr string
	for _, k := range info.Kinds {
		if k.Kind == "nodes" {
			nodeErr = k.Error
		}
	}
	if !strings.Contains(nodeErr, "may not list nodes") {
		t.Errorf("nodes state: %q", nodeErr)
	}
	if info.Summary.NodesTotal != nil || info.Summary.PodsNotReady == nil || *info.Summary.PodsNotReady != 3 {
		t.Errorf("summary: nodes %v, pods not ready %v; want no node count and 3 pods not ready", info.Summary.NodesTotal, info.Summary.PodsNotReady)
	}
}

// TestAllowedNamespacesWithClusterWideRights: an agent whose service
// account may read everywhere still streams only its allowed namespaces,
// the Namespace objects included.
func TestAllowedNamespacesWithClusterWideRights(t *testing.T) {
	ctx := t.Context()
	saDir, err := apiServer(t).NewServiceAccountDir(ctx, "inv-wide", "agent")
	if err != nil {
		t.Fatal(err)
	}
	if err := apiServer(t).GrantInventory(ctx, "inv-wide", "agent"); err != nil {
		t.Fatal(err)
	}
	wideA, wideB, wideC := unique("wide-a"), unique("wide-b"), unique("wide-c")
	for _, ns := range []string{wideA, wideB} {
		mustNamespace(t, ns)
		mustDo(t, "POST", "/api/v1/namespaces/"+ns+"/pods", pod(ns, "app", nil))
	}
	w := newTestWatcher(t, saDir, wideA)
	runWatcher(t, w)
	store := hubstore.New(hubstore.Config{})
	stream(t, w, store, "c-wide", "")
	eventually(t, 10*time.Second, "the pod and the Namespace of wide-a", func() bool {
		return slices.Equal(names(store, "c-wide", "pods"), []string{wideA + "/app"}) &&
			slices.Equal(names(store, "c-wide", "namespaces"), []string{"/" + wideA})
	})
	// A namespace made later is not streamed either.
	mustNamespace(t, wideC)
	mustDo(t, "POST", "/api/v1/namespaces/"+wideA+"/pods", pod(wideA, "later", nil))
	eventually(t, 5*time.Second, "the later pod of wide-a", func() bool {
		return slices.Contains(names(store, "c-wide", "pods"), wideA+"/later")
	})
	if got := names(store, "c-wide", "namespaces"); !slices.Equal(got, []string{"/" + wideA}) {
		t.Errorf("namespaces streamed: %v, want only wide-a", got)
	}
}

// TestDiscoveryAndAccessOnARealServer checks the watcher's own discovery
// (aggregated, and the older per-version lists) and SelfSubjectAccessReviews
// against the API server.
func TestDiscoveryAndAccessOnARealServer(t *testing.T) {
	ctx := t.Context()
	saDir, err := apiServer(t).NewServiceAccountDir(ctx, "inv-disc", "agent")
	if err != nil {
		t.Fatal(err)
	}
	discA, discB := unique("disc-a"), unique("disc-b")
	if err := apiServer(t).GrantInventory(ctx, "inv-disc", "agent", discA); err != nil {
		t.Fatal(err)
	}
	w := newTestWatcher(t, saDir)
	// The test server serves the built-in kinds; no Argo CD or Istio
	// Gateways. The CRDs of testdata are there once a test installed
	// them, and then at their versions.
	want := map[string]string{
		"nodes": "v1", "namespaces": "v1", "pods": "v1", "services": "v1",
		"deployments": "v1", "statefulsets": "v1", "daemonsets": "v1",
		"jobs": "v1", "cronjobs": "v1", "ingresses": "v1",
		"replicasets": "v1", "resourcequotas": "v1", "events": "v1",
	}
	ofTestdata := map[string]string{
		"rollouts": "v1alpha1", "workflows": "v1alpha1", "workflowtemplates": "v1alpha1",
		"virtualservices": "v1", "sparkapplications": "v1beta2",
	}
	for _, legacy := range []bool{false, true} {
		served, err := w.Served(ctx, legacy)
		if err != nil {
			t.Errorf("legacy %v: %v", legacy, err)
		}
		got := map[string]string{}
		for gr, v := range served {
			k, ok := inventory.LookupKind(gr.Resource)
			if !ok || k.Group != gr.Group {
				t.Errorf("legacy %v: served %v", legacy, gr)
			}
			if crd, ok := ofTestdata[gr.Resource]; ok {
				if v != crd {
					t.Errorf("legacy %v: %s at %s, want %s", legacy, gr, v, crd)
				}
				continue
			}
			got[gr.Resource] = v
		}
		if !maps.Equal(got, want) {
			t.Errorf("legacy %v: served %v, want %v", legacy, got, want)
		}
	}
	for _, tc := range []struct {
		verb, group, resource, ns string
		want                      bool
	}{
		{"list", "", "pods", discA, true},
		{"watch", "apps", "deployments", discA, true},
		{"list", "", "pods", "", false},
		{"list", "", "pods", discB, false},
		{"list", "", "secrets", discA, false},
		{"delete", "", "pods", discA, false},
	} {
		got, err := w.Allowed(ctx, tc.verb, tc.group, tc.resource, tc.ns)
		if err != nil || got != tc.want {
			t.Errorf("may %s %s %q in %q: %v, %v; want %v", tc.verb, tc.group, tc.resource, tc.ns, got, err, tc.want)
		}
	}
	// A refused review is reported with the API server's message.
	w2 := newTestWatcherToken(t, saDir, "not-a-token")
	if _, err := w2.Allowed(ctx, "list", "", "pods", ""); err == nil || !strings.Contains(err.Error(), "Unauthorized") {
		t.Errorf("review with a bad token: %v", err)
	}
}

// newTestWatcherToken is newTestWatcher with a fixed bearer token.
func newTestWatcherToken(t *testing.T, saDir, token string) *watch.Watcher {
	t.Helper()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := watch.New(watch.Config{Host: apiServer(t).URL, CAFile: filepath.Join(saDir, "ca.crt"), TokenFile: tokenFile})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestInventoryGoesOutInSmallWrites: a snapshot larger than a TLS record
// reaches the hub in writes of at most 4 KiB, so in records no larger: the
// hub keeps a read buffer the size of an agent's largest record for as
// long as it stays connected (decision 020).
func TestInventoryGoesOutInSmallWrites(t *testing.T) {
	ctx := t.Context()
	if err := apiServer(t).GrantInventory(ctx, localkube.Namespace, localkube.ServiceAccount); err != nil {
		t.Fatal(err)
	}
	ns := unique("inv-small")
	mustNamespace(t, ns)
	const pods = 300
	for i := range pods {
		mustDo(t, "POST", "/api/v1/namespaces/"+ns+"/pods", pod(ns, fmt.Sprintf("web-%03d", i), map[string]string{"app": "small-writes"}))
	}
	w := newTestWatcher(t, apiServer(t).ServiceAccountDir)
	runWatcher(t, w)
	store := hubstore.New(hubstore.Config{})
	f := stream(t, w, store, "c1", "")
	eventually(t, 10*time.Second, "the snapshot with every pod", func() bool {
		n := 0
		for _, name := range names(store, "c1", "pods") {
			if strings.HasPrefix(name, ns+"/") {
				n++
			}
		}
		return n == pods
	})
	if got := f.written.Load(); got < 32<<10 {
		t.Fatalf("the snapshot took %d bytes; the test needs one of several TLS records (32 KiB and more)", got)
	}
	if got := f.largestWrite.Load(); got > 4<<10 {
		t.Errorf("the largest write of %d bytes is over 4 KiB", got)
	}
	t.Logf("%d bytes written, the largest write %d", f.written.Load(), f.largestWrite.Load())
}

// TestNumbersFromARealServer: the counts in a summary (ready replicas,
// restarts) are read from objects as the reflector decodes a real API
// server's answers, where JSON numbers arrive as float64. There is no
// controller here, so the test writes the status itself.
func TestNumbersFromARealServer(t *testing.T) {
	ctx := t.Context()
	if err := apiServer(t).GrantInventory(ctx, localkube.Namespace, localkube.ServiceAccount); err != nil {
		t.Fatal(err)
	}
	ns := unique("inv-numbers")
	mustNamespace(t, ns)
	deployments := "/apis/apps/v1/namespaces/" + ns + "/deployments"
	mustDo(t, "POST", deployments, map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "web"},
		"spec": map[string]any{"replicas": 2, "selector": map[string]any{"matchLabels": map[string]string{"app": "web"}},
			"template": map[string]any{"metadata": map[string]any{"labels": map[string]string{"app": "web"}},
				"spec": map[string]any{"containers": []any{map[string]any{"name": "main", "image": "registry.example/app:1"}}}}},
	})
	mustDo(t, "PATCH", deployments+"/web/status", map[string]any{"status": map[string]any{"replicas": 2, "readyReplicas": 2}})
	pods := "/api/v1/namespaces/" + ns + "/pods"
	mustDo(t, "POST", pods, pod(ns, "web-1", nil))
	mustDo(t, "PATCH", pods+"/web-1/status", map[string]any{"status": map[string]any{"phase": "Running",
		"conditions":        []any{map[string]any{"type": "Ready", "status": "True"}},
		"containerStatuses": []any{map[string]any{"name": "main", "image": "registry.example/app:1", "imageID": "", "ready": true, "restartCount": 3, "state": map[string]any{"running": map[string]any{}}}},
	}})

	w := newTestWatcher(t, apiServer(t).ServiceAccountDir, ns)
	runWatcher(t, w)
	store := hubstore.New(hubstore.Config{})
	stream(t, w, store, "c1", "")
	item := func(kind string) (hubstore.Item, bool) {
		items, _ := store.Select("c1", hubstore.Query{Kind: kind, Namespace: ns}, allow)
		if len(items) != 1 {
			return hubstore.Item{}, false
		}
		return items[0], true
	}
	eventually(t, 10*time.Second, "the deployment and the pod", func() bool {
		_, d := item("deployments")
		_, p := item("pods")
		return d && p
	})
	if d, _ := item("deployments"); d.Replicas != "2/2" || !d.Ready {
		t.Errorf("deployment: replicas %q, ready %v; want 2/2, ready", d.Replicas, d.Ready)
	}
	if p, _ := item("pods"); p.Restarts != 3 || !p.Ready {
		t.Errorf("pod: %d restarts, ready %v; want 3, ready", p.Restarts, p.Ready)
	}
}

// TestAnUnreachableClusterSaysSo: an API server that can't be reached from
// the start leaves every kind with the reason, not an empty inventory that
// looks complete; and the reason names the request's path, not its URL.
func TestAnUnreachableClusterSaysSo(t *testing.T) {
	saDir, err := apiServer(t).NewServiceAccountDir(t.Context(), "inv-away", "agent")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens there now
	w, err := watch.New(watch.Config{
		Host: "https://" + dead, CAFile: filepath.Join(saDir, "ca.crt"), TokenFile: filepath.Join(saDir, "token"),
		Rediscover: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	runWatcher(t, w)
	store := hubstore.New(hubstore.Config{})
	stream(t, w, store, "away", "")
	var kinds []protocol.KindState
	eventually(t, 10*time.Second, "the kinds' states", func() bool {
		info, ok := store.Info("away")
		kinds = info.Kinds
		return ok && len(kinds) == len(inventory.KindNames())
	})
	for _, k := range kinds {
		if !strings.HasPrefix(k.Error, `can't discover the cluster's APIs: Get "/api": dial tcp `+dead) || !strings.Contains(k.Error, "connection refused") || k.Missing {
			t.Errorf("%s: %q (missing %v), want why, with the path alone", k.Kind, k.Error, k.Missing)
		}
	}
}

// TestPartOfDiscoveryFailingKeepsWhatIsWatched: when /api answers and /apis
// doesn't (a 429 from the API server's priority and fairness, a timeout),
// discovery is partial, not a cluster that stopped serving every group: the
// apps group's kinds go on being watched, and their objects stay.
func TestPartOfDiscoveryFailingKeepsWhatIsWatched(t *testing.T) {
	kube := apiServer(t)
	saDir, err := kube.NewServiceAccountDir(t.Context(), "inv-partial", "agent")
	if err != nil {
		t.Fatal(err)
	}
	if err := kube.GrantInventory(t.Context(), "inv-partial", "agent"); err != nil {
		t.Fatal(err)
	}
	// A proxy in front of the API server that can refuse /apis.
	var refuse atomic.Bool
	var refused atomic.Int32
	w := watchThrough(t, kube, saDir, func(w http.ResponseWriter, r *http.Request) bool {
		if !refuse.Load() || r.URL.Path != "/apis" {
			return false
		}
		refused.Add(1)
		w.Header().Set("Retry-After", "1")
		http.Error(w, `{"kind":"Status","message":"too many requests","code":429}`, http.StatusTooManyRequests)
		return true
	})
	ns := unique("partial")
	mustNamespace(t, ns)
	mustDo(t, "POST", "/apis/apps/v1/namespaces/"+ns+"/deployments", deployment(ns, "web"))
	runWatcher(t, w)
	store := hubstore.New(hubstore.Config{})
	stream(t, w, store, "partial", "")
	want := ns + "/web"
	eventually(t, 10*time.Second, "the deployment in the inventory", func() bool { return slices.Contains(names(store, "partial", "deployments"), want) })

	refuse.Store(true)
	// Two rediscoveries, each refused /apis, have run their course once a
	// third asks; and a deployment made after that reaches the store, so
	// the store has had what the watcher made of them.
	eventually(t, 10*time.Second, "three rediscoveries refused /apis", func() bool { return refused.Load() >= 3 })
	mustDo(t, "POST", "/apis/apps/v1/namespaces/"+ns+"/deployments", deployment(ns, "later"))
	eventually(t, 10*time.Second, "a deployment made after the refusals in the inventory", func() bool {
		return slices.Contains(names(store, "partial", "deployments"), ns+"/later")
	})
	if got := names(store, "partial", "deployments"); !slices.Contains(got, want) {
		t.Errorf("after /apis was refused, deployments are %v; want %s kept", got, want)
	}
	info, _ := store.Info("partial")
	for _, k := range info.Kinds {
		if k.Kind == "deployments" && (k.Missing || k.Error != "") {
			t.Errorf("after /apis was refused, deployments say: %q (missing %v); want no change", k.Error, k.Missing)
		}
	}
}

func deployment(ns, name string) map[string]any {
	return map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"selector": map[string]any{"matchLabels": map[string]any{"app": name}},
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"app": name}},
				"spec":     map[string]any{"containers": []any{map[string]any{"name": "main", "image": "registry.example/app:1"}}},
			},
		},
	}
}

// watchThrough returns a watcher of kube as saDir's account that reaches it
// through a proxy, which hands each request to refuse first: refuse answers
// it and says true, or says false and the API server answers it.
func watchThrough(t *testing.T, kube *localkube.Cluster, saDir string, refuse func(http.ResponseWriter, *http.Request) bool) *watch.Watcher {
	t.Helper()
	target, _ := url.Parse(kube.URL)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = kube.HTTPClient().Transport
	proxy := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !refuse(w, r) {
			rp.ServeHTTP(w, r)
		}
	}))
	// Closed after the watcher stops (cleanups run last first): Close waits
	// for the watches going through it.
	t.Cleanup(proxy.Close)
	caFile := filepath.Join(t.TempDir(), "proxy-ca.crt")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: proxy.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := watch.New(watch.Config{
		Host: proxy.URL, CAFile: caFile, TokenFile: filepath.Join(saDir, "token"), Rediscover: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestAKindThatNeverListsDoesNotHoldTheSnapshot: when one kind's list fails
// at every try (a CRD whose conversion webhook is down answers every list
// with a 500), the snapshot goes out once every kind has tried, with that
// kind's error, rather than after the whole 30 s SyncWait at every connect;
// and the kind's objects follow once its list works.
func TestAKindThatNeverListsDoesNotHoldTheSnapshot(t *testing.T) {
	kube := apiServer(t)
	saDir, err := kube.NewServiceAccountDir(t.Context(), "inv-nolist", "agent")
	if err != nil {
		t.Fatal(err)
	}
	if err := kube.GrantInventory(t.Context(), "inv-nolist", "agent"); err != nil {
		t.Fatal(err)
	}
	ns := unique("nolist")
	mustNamespace(t, ns)
	mustDo(t, "POST", "/api/v1/namespaces/"+ns+"/services", map[string]any{
		"metadata": map[string]any{"name": "web"},
		"spec":     map[string]any{"ports": []any{map[string]any{"port": 80}}},
	})
	var broken atomic.Bool
	broken.Store(true)
	w := watchThrough(t, kube, saDir, func(w http.ResponseWriter, r *http.Request) bool {
		if !broken.Load() || r.URL.Path != "/apis/apps/v1/deployments" {
			return false
		}
		http.Error(w, `{"kind":"Status","message":"conversion webhook for apps/v1 failed","code":500}`, http.StatusInternalServerError)
		return true
	})
	runWatcher(t, w)
	store := hubstore.New(hubstore.Config{})
	stream(t, w, store, "nolist", "") // SyncWait is its 30 s
	// Well within the 30 s: the snapshot didn't wait it out.
	eventually(t, 15*time.Second, "the snapshot", func() bool { return slices.Contains(names(store, "nolist", "services"), ns+"/web") })
	info, _ := store.Info("nolist")
	var state protocol.KindState
	for _, k := range info.Kinds {
		if k.Kind == "deployments" {
			state = k
		}
	}
	if !strings.Contains(state.Error, "conversion webhook for apps/v1 failed") {
		t.Errorf("deployments in the snapshot: %+v; want the list's error", state)
	}

	mustDo(t, "POST", "/apis/apps/v1/namespaces/"+ns+"/deployments", map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "api", "namespace": ns},
		"spec": map[string]any{
			"selector": map[string]any{"matchLabels": map[string]any{"app": "api"}},
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"app": "api"}},
				"spec":     map[string]any{"containers": []any{map[string]any{"name": "main", "image": "registry.example/app:1"}}},
			},
		},
	})
	broken.Store(false)
	eventually(t, 60*time.Second, "the deployment once its list works", func() bool { return slices.Contains(names(store, "nolist", "deployments"), ns+"/api") })
	info, _ = store.Info("nolist")
	for _, k := range info.Kinds {
		if k.Kind == "deployments" && k.Error != "" {
			t.Errorf("deployments after a list worked: %q; want no error", k.Error)
		}
	}
}
