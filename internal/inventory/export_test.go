package inventory

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Served is what the watcher finds the cluster serves, with aggregated
// discovery, or with the older per-version lists when legacy.
func (w *Watcher) Served(ctx context.Context, legacy bool) (map[schema.GroupResource]string, error) {
	if !legacy {
		return w.served(ctx)
	}
	d, err := w.api.discoverLegacy(ctx, Kinds)
	return versionsFor(Kinds, d), err
}

// Allowed is the watcher's SelfSubjectAccessReview.
func (w *Watcher) Allowed(ctx context.Context, verb, group, resource, ns string) (bool, error) {
	return w.api.allowed(ctx, verb, group, resource, ns)
}
