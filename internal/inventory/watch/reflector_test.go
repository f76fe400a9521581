package watch_test

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/inventory/watch"
	"github.com/tetherhq/tether/internal/localkube"
	"github.com/tetherhq/tether/internal/protocol"
)

// TestReflectorListsInPagesAndFollowsAcrossWatches runs one reflector with
// pages of 2 objects and watches the API server ends after 1 to 2 s, and
// changes the pods across several watches. What reaches the API server
// shows the list took 3 pages, and that each later change came by a later
// watch, from where the one before ended, with no list again.
func TestReflectorListsInPagesAndFollowsAcrossWatches(t *testing.T) {
	saDir, ns := reflectorScope(t, "inv-refl", "refl-a")
	for _, name := range []string{"p1", "p2", "p3", "p4", "p5"} {
		mustDo(t, "POST", "/api/v1/namespaces/"+ns+"/pods", pod(ns, name, nil))
	}
	var calls collectionCalls
	w := watchThrough(t, apiServer(t), saDir, func(_ http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path == "/api/v1/namespaces/"+ns+"/pods" {
			calls.add(r.URL.Query())
		}
		return false
	})
	var changed changes
	r := w.NewReflector("pods", ns, time.Second, 2, changed.add)
	runReflector(t, r)

	eventually(t, 10*time.Second, "the first list, over 3 pages", func() bool {
		return slices.Equal(r.Names(), []string{ns + "/p1", ns + "/p2", ns + "/p3", ns + "/p4", ns + "/p5"})
	})
	if lists, _ := calls.get(); len(lists) != 3 || lists[0].Get("continue") != "" || lists[1].Get("continue") == "" || lists[2].Get("continue") == "" || lists[0].Get("limit") != "2" {
		t.Fatalf("the first list asked %v; want 3 pages of 2, the later two with continue", lists)
	}
	// Each change lands in a later watch than the one before: the next
	// change waits until a watch began after the one before was seen.
	watchesAfter := func(what string, n int) int {
		t.Helper()
		var got int
		eventually(t, 10*time.Second, what, func() bool { _, watches := calls.get(); got = len(watches); return got > n })
		return got
	}
	n := watchesAfter("a watch after the list", 0)
	mustDo(t, "DELETE", "/api/v1/namespaces/"+ns+"/pods/p1", nil)
	eventually(t, 10*time.Second, "p1 gone", func() bool { return !slices.Contains(r.Names(), ns+"/p1") })
	_, watches := calls.get()
	watchesAfter("a watch after the one that saw p1 go", len(watches))
	mustDo(t, "POST", "/api/v1/namespaces/"+ns+"/pods", pod(ns, "p6", map[string]string{"a": "b"}))
	eventually(t, 10*time.Second, "p1 gone and p6 there", func() bool {
		return slices.Equal(r.Names(), []string{ns + "/p2", ns + "/p3", ns + "/p4", ns + "/p5", ns + "/p6"})
	})
	if changed := changed.take(); !slices.Contains(changed, "p1") || !slices.Contains(changed, "p6") {
		t.Errorf("changes reported: %v; want p1 and p6 among them", changed)
	}
	lists, watches := calls.get()
	if len(lists) != 3 {
		t.Errorf("%d list requests; want the first list's 3 alone: the watches follow one another", len(lists))
	}
	// Each watch starts where the one before ended (bookmarks move that
	// on while nothing changes), never from the list's resourceVersion
	// again once a change came.
	for i := 1; i < len(watches); i++ {
		if rvNumber(t, watches[i]) < rvNumber(t, watches[i-1]) {
			t.Errorf("watch %d started from resourceVersion %s, before watch %d's %s", i+1, watches[i], i, watches[i-1])
		}
	}
	if last := watches[len(watches)-1]; rvNumber(t, last) <= rvNumber(t, watches[n-1]) {
		t.Errorf("the last watch started from resourceVersion %s, no later than the watches before p1 went (%s): it did not follow", last, watches[n-1])
	}
}

// calls records the lists (their queries) and the watches (their
// resourceVersions) of a collection that reach the API server.
type collectionCalls struct {
	mu      sync.Mutex
	lists   []url.Values
	watches []string
}

func (c *collectionCalls) add(q url.Values) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if q.Get("watch") == "1" {
		c.watches = append(c.watches, q.Get("resourceVersion"))
	} else {
		c.lists = append(c.lists, q)
	}
}

func (c *collectionCalls) get() ([]url.Values, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.lists), slices.Clone(c.watches)
}

// rvNumber reads a resourceVersion as the number the test API server's
// etcd makes it (opaque to clients, but ordered here).
func rvNumber(t *testing.T, rv string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		t.Fatalf("resourceVersion %q: %v", rv, err)
	}
	return n
}

// TestWatchFromCompactedHistoryAsksForAList watches from a resourceVersion
// whose history etcd has compacted away: the API server answers 410 Gone,
// and the reflector must take that as a reason to list again, not as an
// error to wait out and repeat. Cronjobs are watched from etcd here, with
// no watch cache in between (TestMain).
func TestWatchFromCompactedHistoryAsksForAList(t *testing.T) {
	ctx := t.Context()
	saDir, ns := reflectorScope(t, "inv-gone", "gone")
	w := newTestWatcher(t, saDir, ns)
	r := w.NewReflector("cronjobs", ns, time.Second, 10, func(protocol.ResourceRef) {})
	// Until a compaction passes it, resourceVersion 1 is history etcd
	// still has. Each write moves the revision on for the next compaction.
	gone := false
	var err error
	for i := 0; !gone && i < 10; i++ {
		mustDo(t, "POST", "/apis/batch/v1/namespaces/"+ns+"/cronjobs", cronJob(ns, fmt.Sprintf("c%d", i)))
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		gone, err = r.Watch(wctx, "1")
		timedOut := wctx.Err() != nil
		cancel()
		if timedOut {
			t.Fatal("a watch asked to last at most 2 s ran until the test's 10 s")
		}
		if !gone && err != nil {
			t.Fatalf("a watch from resourceVersion 1 failed: %v", err)
		}
	}
	if !gone {
		t.Fatalf("10 watches from resourceVersion 1, a compaction every %s, never ended in 410 Gone", compactionInterval)
	}
}

func cronJob(ns, name string) map[string]any {
	return map[string]any{
		"apiVersion": "batch/v1", "kind": "CronJob",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{"schedule": "0 0 * * *", "jobTemplate": map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
			"restartPolicy": "Never", "containers": []any{map[string]any{"name": "main", "image": "registry.example/app:1"}}}}}}},
	}
}

// TestReflectorListsAgainWhenItsHistoryIsCompacted: a reflector whose next
// watch starts from a resourceVersion etcd has compacted away lists again,
// and so still sees what changes after.
func TestReflectorListsAgainWhenItsHistoryIsCompacted(t *testing.T) {
	saDir, ns := reflectorScope(t, "inv-relist", "relist")
	elsewhere := unique("relist-other")
	mustNamespace(t, elsewhere)
	mustDo(t, "POST", "/apis/batch/v1/namespaces/"+ns+"/cronjobs", cronJob(ns, "first"))
	var calls collectionCalls
	w := watchThrough(t, apiServer(t), saDir, func(_ http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path == "/apis/batch/v1/namespaces/"+ns+"/cronjobs" {
			calls.add(r.URL.Query())
		}
		return false
	})
	r := w.NewReflector("cronjobs", ns, time.Second, 10, func(protocol.ResourceRef) {})
	runReflector(t, r)
	eventually(t, 10*time.Second, "the first list", func() bool { return slices.Equal(r.Names(), []string{ns + "/first"}) })

	// Nothing changes in ns, so each watch starts from the list's
	// resourceVersion; writes elsewhere move etcd's revision past it, and
	// compactions take its history away, until the reflector lists again.
	listedAgain := func() bool { lists, _ := calls.get(); return len(lists) >= 2 }
	for i, give := 0, time.Now().Add(10*compactionInterval); !listedAgain(); i++ {
		if time.Now().After(give) {
			t.Fatalf("no list again %s after the first, a compaction every %s", 10*compactionInterval, compactionInterval)
		}
		mustDo(t, "POST", "/api/v1/namespaces/"+elsewhere+"/configmaps", map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": fmt.Sprintf("cm%d", i)}})
		time.Sleep(compactionInterval / 4)
	}
	mustDo(t, "POST", "/apis/batch/v1/namespaces/"+ns+"/cronjobs", cronJob(ns, "second"))
	eventually(t, 10*time.Second, "the cronjob made after the compactions", func() bool {
		return slices.Equal(r.Names(), []string{ns + "/first", ns + "/second"})
	})
}

// changes records the names a reflector reports as changed.
type changes struct {
	mu    sync.Mutex
	names []string
}

func (c *changes) add(ref protocol.ResourceRef) {
	c.mu.Lock()
	c.names = append(c.names, ref.Name)
	c.mu.Unlock()
}

// take returns the names reported since the last take.
func (c *changes) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	names := c.names
	c.names = nil
	return names
}

// runReflector runs r until the test ends.
func runReflector(t *testing.T, r *watch.Reflector) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// reflectorScope makes a service account in namespace account that may
// list and watch the inventory's kinds in a new namespace named after ns,
// and returns its pod directory and that namespace.
func reflectorScope(t *testing.T, account, ns string) (saDir, namespace string) {
	t.Helper()
	saDir, err := apiServer(t).NewServiceAccountDir(t.Context(), account, "agent")
	if err != nil {
		t.Fatal(err)
	}
	namespace = unique(ns)
	if err := apiServer(t).GrantInventory(t.Context(), account, "agent", namespace); err != nil {
		t.Fatal(err)
	}
	return saDir, namespace
}

// TestListGivesUpOnASilentAPIServer: an API server that takes a list and
// never answers doesn't hold the kind for ever: the page times out, and the
// reflector lists again after its backoff.
func TestListGivesUpOnASilentAPIServer(t *testing.T) {
	var lists atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lists.Add(1)
		<-r.Context().Done() // never answers
	}))
	r := fakeAPIServer(t, srv).NewReflector("pods", "", time.Minute, 10, func(protocol.ResourceRef) {})
	r.SetPageTimeout(200 * time.Millisecond)
	runReflector(t, r)
	eventually(t, 10*time.Second, "a second list after the first one's page timed out", func() bool { return lists.Load() >= 2 })
}

// fakeAPIServer returns a watcher of srv, an API server played by a test,
// which it closes when the test ends (after the watcher's reflectors stop:
// Close waits for the watches they hold).
func fakeAPIServer(t *testing.T, srv *httptest.Server) *watch.Watcher {
	t.Helper()
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	mustWrite(t, filepath.Join(dir, "ca.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	mustWrite(t, filepath.Join(dir, "token"), []byte("service-account-token"))
	w, err := watch.New(watch.Config{Host: srv.URL, CAFile: filepath.Join(dir, "ca.crt"), TokenFile: filepath.Join(dir, "token")})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func mustWrite(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestRightsTakenAwayEmptyTheReflector: once the agent may no longer list a
// kind where a reflector runs, its next watch is refused, and what it last
// saw goes (reported as changed, so the hub hears of the deletes) rather
// than stand as the cluster's state.
func TestRightsTakenAwayEmptyTheReflector(t *testing.T) {
	saDir, ns := reflectorScope(t, "inv-revoked", "refl-r")
	mustDo(t, "POST", "/api/v1/namespaces/"+ns+"/pods", pod(ns, "p1", nil))
	w := newTestWatcher(t, saDir, ns)
	var changed changes
	r := w.NewReflector("pods", ns, time.Second, 100, changed.add)
	runReflector(t, r)
	eventually(t, 10*time.Second, "the pod listed", func() bool { return slices.Equal(r.Names(), []string{ns + "/p1"}) })
	changed.take()

	binding := localkube.InventoryRole + "-inv-revoked-agent"
	mustDo(t, "DELETE", "/apis/rbac.authorization.k8s.io/v1/namespaces/"+ns+"/rolebindings/"+binding, nil)
	// The watch under way goes on until it ends, within 2 s; the next is refused.
	eventually(t, 15*time.Second, "the pod forgotten", func() bool { return len(r.Names()) == 0 })
	if changed := changed.take(); !slices.Equal(changed, []string{"p1"}) {
		t.Errorf("changes reported: %v; want p1's", changed)
	}
}

// TestAPageTooLargeIsAskedForInSmallerPages: a page of a list over the
// bound (objects of hundreds of KB, as Argo CD Applications can be) is
// asked for again with half as many objects, until it fits, rather than
// fail the kind at every try.
func TestAPageTooLargeIsAskedForInSmallerPages(t *testing.T) {
	const objects, objectBytes = 20, 100 << 10
	var mu sync.Mutex
	var limits []int
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") != "" {
			<-r.Context().Done()
			return
		}
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		from, _ := strconv.Atoi(r.URL.Query().Get("continue"))
		mu.Lock()
		limits = append(limits, limit)
		mu.Unlock()
		var items []map[string]any
		for i := from; i < min(from+limit, objects); i++ {
			items = append(items, map[string]any{"metadata": map[string]any{"name": fmt.Sprintf("app-%02d", i), "namespace": "argocd",
				"annotations": map[string]any{"big": strings.Repeat("x", objectBytes)}}})
		}
		meta := map[string]any{"resourceVersion": "7"}
		if from+limit < objects {
			meta["continue"] = strconv.Itoa(from + limit)
		}
		json.NewEncoder(w).Encode(map[string]any{"metadata": meta, "items": items})
	}))
	r := fakeAPIServer(t, srv).NewReflector("applications", "", time.Minute, 500, func(protocol.ResourceRef) {})
	r.SetPageBytes(1 << 20) // ten of the objects, not twenty
	runReflector(t, r)
	eventually(t, 10*time.Second, "every object listed", func() bool { return len(r.Names()) == objects })
	mu.Lock()
	defer mu.Unlock()
	if limits[0] != 500 || slices.Max(limits[len(limits)-2:]) > 10 {
		t.Errorf("pages asked for: %v; want 500, then halved until they fit", limits)
	}
}

// TestObjectsWithoutANameAreLeftOut: an object without a name, which no
// API server sends but one could, is left out of the list and the watch:
// the hub refuses any update with one, and with it the whole inventory.
func TestObjectsWithoutANameAreLeftOut(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") != "" {
			json.NewEncoder(w).Encode(map[string]any{"type": "ADDED", "object": map[string]any{"metadata": map[string]any{"namespace": "a", "resourceVersion": "8"}}})
			json.NewEncoder(w).Encode(map[string]any{"type": "ADDED", "object": map[string]any{"metadata": map[string]any{"name": "p2", "namespace": "a", "resourceVersion": "9"}}})
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"metadata": map[string]any{"resourceVersion": "7"}, "items": []any{
			map[string]any{"metadata": map[string]any{"name": "p1", "namespace": "a"}},
			map[string]any{"metadata": map[string]any{"namespace": "a"}},
		}})
	}))
	var changed changes
	r := fakeAPIServer(t, srv).NewReflector("pods", "", time.Minute, 500, changed.add)
	runReflector(t, r)
	eventually(t, 10*time.Second, "the named pods", func() bool { return slices.Equal(r.Names(), []string{"a/p1", "a/p2"}) })
	if c := changed.take(); slices.Contains(c, "") {
		t.Errorf("changes reported: %q; want none without a name", c)
	}
}

// TestWatchesRefusedAndListsAllowedWaitBetween: a Role that grants list but
// not watch has each watch refused right after a list that works. The
// reflector lists again, as a refused watch may mean rights taken away, but
// after its backoff, not as fast as the API server answers.
func TestWatchesRefusedAndListsAllowedWaitBetween(t *testing.T) {
	var lists, watches atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") != "" {
			watches.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, `{"kind":"Status","status":"Failure","reason":"Forbidden","code":403}`)
			return
		}
		lists.Add(1)
		fmt.Fprint(w, `{"metadata":{"resourceVersion":"7"},"items":[]}`)
	}))
	r := fakeAPIServer(t, srv).NewReflector("pods", "", time.Minute, 10, func(protocol.ResourceRef) {})
	// Each backoff is handed to the test, which checks it and ends it.
	slept, release := make(chan time.Duration), make(chan struct{})
	r.SetSleep(func(ctx context.Context, d time.Duration) bool {
		select {
		case slept <- d:
		case <-ctx.Done():
			return false
		}
		select {
		case <-release:
			return true
		case <-ctx.Done():
			return false
		}
	})
	runReflector(t, r)
	low := 800 * time.Millisecond
	for i := range 4 {
		var d time.Duration
		select {
		case d = <-slept:
		case <-time.After(10 * time.Second):
			t.Fatalf("no backoff after %d lists and %d refused watches", lists.Load(), watches.Load())
		}
		if n, m := lists.Load(), watches.Load(); n != int32(i+1) || m != int32(i+1) {
			t.Errorf("backoff %d: after %d lists and %d watches; want %d of each, a wait after each refused watch", i+1, n, m, i+1)
		}
		if d < low || d > low*3/2 {
			t.Errorf("backoff %d: %s; want %s to %s, doubling each time", i+1, d, low, low*3/2)
		}
		low *= 2
		release <- struct{}{}
	}
}

// TestAListWhoseContinueTokenExpiredStartsAgain: a list of many pages may
// outlive etcd's revision it began at (compacted every 5 minutes, and
// every 2 s on the test API server), and its next page is then refused
// with 410 Gone. That is no failure to wait out and report, but a list to
// start again at once, as the API server says: the snapshot, which waits
// for each kind's first list, went out with the kind's error, and the
// kind's objects came only after a backoff (TestChangesArriveAndNoGhostsAfterReconnect
// missed a pod made after the snapshot, 3 in 25 runs).
func TestAListWhoseContinueTokenExpiredStartsAgain(t *testing.T) {
	var expiredOnce atomic.Bool
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		item := func(name string) map[string]any {
			return map[string]any{"metadata": map[string]any{"name": name, "namespace": "ns", "resourceVersion": "7"}}
		}
		w.Header().Set("Content-Type", "application/json")
		switch {
		case q.Get("watch") != "":
			<-r.Context().Done()
		case q.Get("continue") == "":
			json.NewEncoder(w).Encode(map[string]any{"metadata": map[string]any{"resourceVersion": "7", "continue": "page-2"},
				"items": []any{item("p1"), item("p2")}})
		case !expiredOnce.Swap(true):
			w.WriteHeader(http.StatusGone)
			io.WriteString(w, `{"kind":"Status","code":410,"reason":"Expired","message":"The provided continue parameter is too old to display a consistent list result."}`)
		default:
			json.NewEncoder(w).Encode(map[string]any{"metadata": map[string]any{"resourceVersion": "7"}, "items": []any{item("p3")}})
		}
	}))
	r := fakeAPIServer(t, srv).NewReflector("pods", "", time.Minute, 2, func(protocol.ResourceRef) {})
	slept := make(chan time.Duration, 1)
	r.SetSleep(func(ctx context.Context, d time.Duration) bool {
		select {
		case slept <- d:
		default:
		}
		<-ctx.Done()
		return false
	})
	runReflector(t, r)
	eventually(t, 10*time.Second, "the whole list", func() bool { return slices.Equal(r.Names(), []string{"ns/p1", "ns/p2", "ns/p3"}) })
	if !expiredOnce.Load() {
		t.Fatal("the second page was never asked for with the expired token")
	}
	select {
	case d := <-slept:
		t.Errorf("the list waited %s before it started again", d)
	default:
	}
}
