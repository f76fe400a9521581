//go:build unix

package localkube

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"syscall"
	"testing"
	"time"
)

// TestControllers: with Config.Controllers the cluster behaves as one with
// a control plane: the aggregated ClusterRoles have rules, a Deployment
// makes a ReplicaSet and a Pod, and a deleted namespace goes. Close stops
// the controller manager too.
func TestControllers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Kubernetes API server (and may build it first)")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	c, err := Start(ctx, Config{Logger: slog.New(slog.NewTextHandler(t.Output(), nil)), Controllers: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	eventually := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !ok(); time.Sleep(200 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("after 30 s: %s", what)
			}
		}
	}

	eventually("the view ClusterRole has rules", func() bool {
		var role struct{ Rules []any }
		return c.Do(ctx, "GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles/view", nil, &role) == nil && len(role.Rules) > 0
	})

	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.Do(ctx, "POST", "/api/v1/namespaces", map[string]any{"metadata": map[string]any{"name": "shop"}}, nil))
	labels := map[string]any{"app": "web"}
	must(c.Do(ctx, "POST", "/apis/apps/v1/namespaces/shop/deployments", map[string]any{
		"metadata": map[string]any{"name": "web"},
		"spec": map[string]any{
			"selector": map[string]any{"matchLabels": labels},
			"template": map[string]any{
				"metadata": map[string]any{"labels": labels},
				"spec":     map[string]any{"containers": []any{map[string]any{"name": "web", "image": "web:1"}}},
			},
		},
	}, nil))
	eventually("the Deployment made a ReplicaSet and a Pod", func() bool {
		var rs, pods struct{ Items []any }
		return c.Do(ctx, "GET", "/apis/apps/v1/namespaces/shop/replicasets", nil, &rs) == nil && len(rs.Items) == 1 &&
			c.Do(ctx, "GET", "/api/v1/namespaces/shop/pods", nil, &pods) == nil && len(pods.Items) == 1
	})

	must(c.Do(ctx, "DELETE", "/api/v1/namespaces/shop", nil, nil))
	eventually("the deleted namespace is gone", func() bool {
		var apiErr *APIError
		err := c.Do(ctx, "GET", "/api/v1/namespaces/shop", nil, nil)
		return errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusNotFound
	})

	pid := c.ctrl.cmd.Process.Pid
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(-pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("kube-controller-manager's process group %d is still there after Close: %v", pid, err)
	}
}
