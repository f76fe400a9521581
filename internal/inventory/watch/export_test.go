package watch

import (
	"context"
	"slices"
	"time"

	"github.com/tetherhq/tether/internal/inventory"
	"github.com/tetherhq/tether/internal/protocol"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Served is what the watcher finds the cluster serves, with aggregated
// discovery, or with the older per-version lists when legacy.
func (w *Watcher) Served(ctx context.Context, legacy bool) (map[schema.GroupResource]string, error) {
	if !legacy {
		return w.served(ctx)
	}
	d, err := w.api.discoverLegacy(ctx, inventory.Kinds)
	return versionsFor(inventory.Kinds, d), err
}

// Allowed is the watcher's SelfSubjectAccessReview.
func (w *Watcher) Allowed(ctx context.Context, verb, group, resource, ns string) (bool, error) {
	return w.api.allowed(ctx, verb, group, resource, ns)
}

// Reflector is one reflector of w's, for tests.
type Reflector struct{ r *reflector }

// NewReflector returns a reflector of kind in namespace (all when "")
// whose watches last watchTimeout to twice that and whose lists ask for
// pages of page objects.
func (w *Watcher) NewReflector(kind, namespace string, watchTimeout time.Duration, page int, changed func(protocol.ResourceRef)) *Reflector {
	k, _ := inventory.LookupKind(kind)
	r := newReflector(w.api, k, k.Versions[0], namespace, func(error) {}, changed)
	r.watchTimeout, r.page = watchTimeout, page
	return &Reflector{r}
}

// SetPageBytes changes how large one page of a list may be.
func (r *Reflector) SetPageBytes(n int) { r.r.pageBytes = n }

// SetPageTimeout changes how long one page of a list may take.
func (r *Reflector) SetPageTimeout(d time.Duration) { r.r.pageTimeout = d }

// SetSleep replaces how the reflector waits out a backoff.
func (r *Reflector) SetSleep(f func(ctx context.Context, d time.Duration) bool) { r.r.sleep = f }

// Run runs the reflector until ctx ends.
func (r *Reflector) Run(ctx context.Context) { r.r.run(ctx) }

// Names lists "namespace/name" of every summary, sorted.
func (r *Reflector) Names() []string {
	var out []string
	for _, res := range r.r.all() {
		out = append(out, res.Namespace+"/"+res.Name)
	}
	slices.Sort(out)
	return out
}

// Watch runs one watch from resourceVersion rv, and reports whether the API
// server said rv's history is gone (a list is due), and the watch's error.
func (r *Reflector) Watch(ctx context.Context, rv string) (gone bool, err error) {
	_, gone, err = r.r.watch(ctx, rv)
	return gone, err
}

// Names lists "namespace/name" of what w's reflectors of kind hold, sorted:
// what the watcher has seen, whether or not a Stream sent it.
func (w *Watcher) Names(kind string) []string {
	w.mu.Lock()
	var refls []*reflector
	for sc, r := range w.scopes {
		if sc.kind == kind {
			refls = append(refls, r.refl)
		}
	}
	w.mu.Unlock()
	var out []string
	for _, r := range refls {
		for _, res := range r.all() {
			out = append(out, res.Namespace+"/"+res.Name)
		}
	}
	slices.Sort(out)
	return out
}
