package inventory_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/protocol"
)

// TestReflectorListsInPagesAndFollowsAcrossWatches runs one reflector with
// pages of 2 objects and watches the API server ends after 1 to 2 s, and
// changes the pods across several watches.
func TestReflectorListsInPagesAndFollowsAcrossWatches(t *testing.T) {
	ctx := t.Context()
	saDir, err := cluster.NewServiceAccountDir(ctx, "inv-refl", "agent")
	if err != nil {
		t.Fatal(err)
	}
	ns := unique("refl-a")
	if err := cluster.GrantInventory(ctx, "inv-refl", "agent", ns); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"p1", "p2", "p3", "p4", "p5"} {
		mustDo(t, "POST", "/api/v1/namespaces/"+ns+"/pods", pod(ns, name, nil))
	}
	w := newTestWatcher(t, saDir, ns)
	var mu sync.Mutex
	var changed []string
	r := w.NewReflector("pods", ns, time.Second, 2, func(ref protocol.ResourceRef) {
		mu.Lock()
		changed = append(changed, ref.Name)
		mu.Unlock()
	})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); r.Run(rctx) }()
	defer func() { cancel(); <-done }()

	eventually(t, 10*time.Second, "the first list, over 3 pages", func() bool {
		return slices.Equal(r.Names(), []string{ns + "/p1", ns + "/p2", ns + "/p3", ns + "/p4", ns + "/p5"})
	})
	// Each change lands in a later watch than the one before.
	time.Sleep(2500 * time.Millisecond)
	mustDo(t, "DELETE", "/api/v1/namespaces/"+ns+"/pods/p1", nil)
	time.Sleep(2500 * time.Millisecond)
	mustDo(t, "POST", "/api/v1/namespaces/"+ns+"/pods", pod(ns, "p6", map[string]string{"a": "b"}))
	eventually(t, 10*time.Second, "p1 gone and p6 there", func() bool {
		return slices.Equal(r.Names(), []string{ns + "/p2", ns + "/p3", ns + "/p4", ns + "/p5", ns + "/p6"})
	})
	mu.Lock()
	defer mu.Unlock()
	if !slices.Contains(changed, "p1") || !slices.Contains(changed, "p6") {
		t.Errorf("changes reported: %v; want p1 and p6 among them", changed)
	}
}
