package watch_test

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	hubstore "github.com/tetherhq/tether/internal/inventory/store"
	"github.com/tetherhq/tether/internal/inventory/watch"
	"github.com/tetherhq/tether/internal/protocol"
)

// fakeKube is an API server played by a test, for the watcher as a whole:
// aggregated discovery of the groups it is given, SelfSubjectAccessReviews
// that review decides, and lists of the objects it holds, whose watches
// stay open and quiet.
type fakeKube struct {
	srv *httptest.Server

	mu sync.Mutex // guards the following
	// groups maps an API group ("" for the core group) to its versions,
	// each with the resources it serves, preferred first.
	groups map[string][]fakeVersion
	// review answers a SelfSubjectAccessReview: the HTTP status, and the
	// Status message when it isn't 201. Nil allows everything.
	review func(attrs map[string]string) (int, string)
	// objects maps a collection's path (like /api/v1/pods) to its items.
	objects map[string][]map[string]any
	// watchEnd is closed to end the watches open now.
	watchEnd chan struct{}
}

// endWatchesLocked ends the watches open now, as the API server does when
// a CRD's versions change. fk.mu is held.
func (fk *fakeKube) endWatchesLocked() {
	close(fk.watchEnd)
	fk.watchEnd = make(chan struct{})
}

type fakeVersion struct {
	version   string
	resources []string
}

func newFakeKube(t *testing.T) *fakeKube {
	t.Helper()
	fk := &fakeKube{groups: map[string][]fakeVersion{}, objects: map[string][]map[string]any{}, watchEnd: make(chan struct{})}
	fk.srv = httptest.NewTLSServer(http.HandlerFunc(fk.serve))
	t.Cleanup(fk.srv.Close)
	return fk
}

// watcher returns a watcher of fk that looks again every rediscover.
func (fk *fakeKube) watcher(t *testing.T, rediscover time.Duration, namespaces ...string) *watch.Watcher {
	t.Helper()
	dir := t.TempDir()
	mustWrite(t, filepath.Join(dir, "ca.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: fk.srv.Certificate().Raw}))
	mustWrite(t, filepath.Join(dir, "token"), []byte("service-account-token"))
	w, err := watch.New(watch.Config{Host: fk.srv.URL, CAFile: filepath.Join(dir, "ca.crt"), TokenFile: filepath.Join(dir, "token"),
		Namespaces: namespaces, Rediscover: rediscover})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func (fk *fakeKube) serve(w http.ResponseWriter, r *http.Request) {
	fk.mu.Lock()
	defer fk.mu.Unlock()
	switch {
	case r.URL.Path == "/api" || r.URL.Path == "/apis":
		var items []any
		for group, versions := range fk.groups {
			if (group == "") != (r.URL.Path == "/api") {
				continue
			}
			var vs []any
			for _, v := range versions {
				var rs []any
				for _, res := range v.resources {
					rs = append(rs, map[string]any{"resource": res})
				}
				vs = append(vs, map[string]any{"version": v.version, "resources": rs})
			}
			items = append(items, map[string]any{"metadata": map[string]any{"name": group}, "versions": vs})
		}
		json.NewEncoder(w).Encode(map[string]any{"kind": "APIGroupDiscoveryList", "items": items})
	case r.Method == "POST" && strings.HasSuffix(r.URL.Path, "/selfsubjectaccessreviews"):
		var review struct {
			Spec struct {
				ResourceAttributes map[string]string `json:"resourceAttributes"`
			} `json:"spec"`
		}
		body, _ := io.ReadAll(r.Body)
		json.Unmarshal(body, &review)
		status, msg := http.StatusCreated, ""
		if fk.review != nil {
			status, msg = fk.review(review.Spec.ResourceAttributes)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		if status != http.StatusCreated {
			json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "status": "Failure", "message": msg, "code": status})
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"status": map[string]any{"allowed": true}})
	case r.URL.Query().Get("watch") != "":
		if !fk.servesLocked(r.URL.Path) {
			w.WriteHeader(http.StatusNotFound)
			json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "status": "Failure", "message": "the server could not find the requested resource", "code": 404})
			return
		}
		end := fk.watchEnd
		fk.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-end:
		}
		fk.mu.Lock()
	default:
		items := fk.objects[r.URL.Path]
		if !fk.servesLocked(r.URL.Path) {
			w.WriteHeader(http.StatusNotFound)
			json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "status": "Failure", "message": "the server could not find the requested resource", "code": 404})
			return
		}
		if items == nil {
			items = []map[string]any{}
		}
		json.NewEncoder(w).Encode(map[string]any{"metadata": map[string]any{"resourceVersion": "1"}, "items": items})
	}
}

// servesLocked says whether path is a collection of a version fk serves:
// /api/v1/pods, /apis/apps/v1/namespaces/a/deployments.
func (fk *fakeKube) servesLocked(path string) bool {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	var group string
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		parts = parts[1:]
	case len(parts) >= 4 && parts[0] == "apis":
		group, parts = parts[1], parts[2:]
	default:
		return false
	}
	version, resource := parts[0], parts[len(parts)-1]
	for _, v := range fk.groups[group] {
		if v.version == version {
			for _, r := range v.resources {
				if r == resource {
					return true
				}
			}
		}
	}
	return false
}

// firstSnapshot streams w into store as cluster until the first snapshot
// is complete there, and fails the test if the stream ends first.
func firstSnapshot(t *testing.T, w *watch.Watcher, store *hubstore.Store, cluster string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	var streamErr error
	streamed := make(chan struct{})
	go func() {
		defer close(streamed)
		streamErr = w.Stream(ctx, pw, watch.StreamOptions{Batch: 10 * time.Millisecond})
		pw.CloseWithError(streamErr)
	}()
	complete := make(chan struct{})
	read := make(chan struct{})
	go func() {
		defer close(read)
		rcv := store.Receiver(cluster)
		for {
			u, err := protocol.ReadUpdate(pr)
			if err != nil {
				return
			}
			rcv.Apply(u, time.Now())
			if u.Complete {
				close(complete)
				return
			}
		}
	}()
	defer func() { cancel(); pr.Close(); <-streamed; <-read }()
	select {
	case <-complete:
	case <-streamed:
		t.Fatalf("the stream ended before its first snapshot was complete: %v", streamErr)
	case <-time.After(30 * time.Second):
		t.Fatal("no complete snapshot within 30 s")
	}
}

// TestRefusedReviewsInManyNamespacesStillSendTheInventory: a webhook that
// refuses every SelfSubjectAccessReview with a long message (a policy
// engine's list of violations) makes each namespace of
// TETHER_ALLOWED_NAMESPACES say why for each kind. Each of those says it
// in at most 1 KiB, as the agent's other kind errors do: together they
// must not outgrow a message, or the hub gets no inventory at all, and the
// agent sends its snapshot again every 5 s.
func TestRefusedReviewsInManyNamespacesStillSendTheInventory(t *testing.T) {
	fk := newFakeKube(t)
	fk.groups[""] = []fakeVersion{{"v1", []string{"nodes", "namespaces", "pods", "services"}}}
	fk.groups["apps"] = []fakeVersion{{"v1", []string{"deployments", "statefulsets", "daemonsets"}}}
	fk.groups["batch"] = []fakeVersion{{"v1", []string{"jobs", "cronjobs"}}}
	fk.groups["networking.k8s.io"] = []fakeVersion{{"v1", []string{"ingresses"}}}
	fk.objects["/api/v1/nodes"] = []map[string]any{{"metadata": map[string]any{"name": "node-1"}}}
	why := `admission webhook "policy.example.com" denied the request: ` + strings.Repeat("resource violates policy require-labels; ", 100)
	fk.review = func(attrs map[string]string) (int, string) {
		if attrs["namespace"] != "" {
			return http.StatusForbidden, why
		}
		return http.StatusCreated, ""
	}
	var namespaces []string
	for i := range 40 {
		namespaces = append(namespaces, fmt.Sprintf("team-%02d", i))
	}
	w := fk.watcher(t, time.Hour, namespaces...)
	runWatcher(t, w)
	store := hubstore.New(hubstore.Config{})
	firstSnapshot(t, w, store, "c")

	info, ok := store.Info("c")
	if !ok {
		t.Fatal("no inventory at the hub")
	}
	refused := 0
	for _, k := range info.Kinds {
		if k.Namespace == "" {
			continue
		}
		refused++
		if !strings.Contains(k.Error, "policy.example.com") || len(k.Error) > 1024 {
			t.Errorf("%s in %s: %d bytes: %.80q…; want why, in at most 1 KiB", k.Kind, k.Namespace, len(k.Error), k.Error)
		}
	}
	if want := 8 * len(namespaces); refused != want {
		t.Errorf("%d kinds refused in a namespace; want %d", refused, want)
	}
	if got := names(store, "c", "nodes"); len(got) != 1 {
		t.Errorf("nodes at the hub: %v; want node-1", got)
	}
}

// TestAKindServedAtAnotherVersionIsWatchedThere: when the cluster stops
// serving the version a kind is watched at (a CRD's old version switched
// off, or the CRD replaced by one with other versions), the agent watches
// it at the version served now, as it would have from the start, rather
// than fail the kind with 404 for as long as it runs.
func TestAKindServedAtAnotherVersionIsWatchedThere(t *testing.T) {
	fk := newFakeKube(t)
	gateway := func(name string) map[string]any {
		return map[string]any{"metadata": map[string]any{"name": name, "namespace": "istio-system"},
			"spec": map[string]any{"servers": []any{map[string]any{"hosts": []any{name + ".example.com"}}}}}
	}
	fk.groups["networking.istio.io"] = []fakeVersion{{"v1beta1", []string{"gateways"}}}
	fk.objects["/apis/networking.istio.io/v1beta1/gateways"] = []map[string]any{gateway("old")}
	w := fk.watcher(t, 20*time.Millisecond)
	runWatcher(t, w)
	store := hubstore.New(hubstore.Config{})
	stream(t, w, store, "c", "")
	eventually(t, 10*time.Second, "the gateway, watched at v1beta1", func() bool {
		return slices.Equal(names(store, "c", "gateways"), []string{"istio-system/old"})
	})

	fk.mu.Lock()
	fk.groups["networking.istio.io"] = []fakeVersion{{"v1", []string{"gateways"}}}
	fk.objects["/apis/networking.istio.io/v1/gateways"] = []map[string]any{gateway("old"), gateway("new")}
	fk.endWatchesLocked()
	fk.mu.Unlock()
	var kind protocol.KindState
	eventually(t, 10*time.Second, "the gateways, watched at v1", func() bool {
		info, _ := store.Info("c")
		for _, k := range info.Kinds {
			if k.Kind == "gateways" {
				kind = k
			}
		}
		return kind.Error == "" && slices.Equal(names(store, "c", "gateways"), []string{"istio-system/new", "istio-system/old"})
	})
}
