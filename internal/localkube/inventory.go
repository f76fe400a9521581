package localkube

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"

	"github.com/tetherhq/tether/internal/inventory"
)

// InventoryRole is the read-only role for the inventory kinds, named as the
// Helm chart names it for a release called "tether".
const InventoryRole = "tether-inventory"

// inventoryRules allow get, list and watch on every inventory kind, and
// nothing else.
func inventoryRules() []map[string]any {
	byGroup := map[string][]string{}
	var groups []string
	for _, k := range inventory.Kinds {
		if _, ok := byGroup[k.Group]; !ok {
			groups = append(groups, k.Group)
		}
		byGroup[k.Group] = append(byGroup[k.Group], k.Name)
	}
	var rules []map[string]any
	for _, g := range groups {
		rules = append(rules, map[string]any{"apiGroups": []string{g}, "resources": byGroup[g], "verbs": []string{"get", "list", "watch"}})
	}
	return rules
}

// GrantInventory lets the service account namespace/name read the inventory
// kinds: everywhere with a ClusterRole when namespaces is empty, otherwise
// with a Role in each namespace, as the chart does with allowedNamespaces.
// Objects that exist already are left as they are.
func (c *Cluster) GrantInventory(ctx context.Context, namespace, name string, namespaces ...string) error {
	subject := []map[string]any{{"kind": "ServiceAccount", "name": name, "namespace": namespace}}
	binding := InventoryRole + "-" + namespace + "-" + name
	if len(namespaces) == 0 {
		return c.createAll(ctx, []created{
			{"/apis/rbac.authorization.k8s.io/v1/clusterroles", map[string]any{
				"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
				"metadata": map[string]any{"name": InventoryRole}, "rules": inventoryRules(),
			}},
			{"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", map[string]any{
				"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
				"metadata": map[string]any{"name": binding},
				"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": InventoryRole},
				"subjects": subject,
			}},
		})
	}
	var objs []created
	for _, ns := range namespaces {
		base := "/apis/rbac.authorization.k8s.io/v1/namespaces/" + ns
		objs = append(objs,
			created{"/api/v1/namespaces", object("v1", "Namespace", "", ns)},
			created{base + "/roles", map[string]any{
				"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
				"metadata": map[string]any{"name": InventoryRole, "namespace": ns}, "rules": inventoryRules(),
			}},
			created{base + "/rolebindings", map[string]any{
				"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
				"metadata": map[string]any{"name": binding, "namespace": ns},
				"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": InventoryRole},
				"subjects": subject,
			}})
	}
	return c.createAll(ctx, objs)
}

// NewServiceAccountDir creates the service account namespace/name (and its
// namespace) if missing, and writes a directory as a pod of it would see
// one: a token and ca.crt. The caller removes dir.
func (c *Cluster) NewServiceAccountDir(ctx context.Context, namespace, name string) (dir string, err error) {
	if err := c.createAll(ctx, []created{
		{"/api/v1/namespaces", object("v1", "Namespace", "", namespace)},
		{"/api/v1/namespaces/" + namespace + "/serviceaccounts", object("v1", "ServiceAccount", namespace, name)},
	}); err != nil {
		return "", err
	}
	token, err := c.tokenFor(ctx, namespace, name)
	if err != nil {
		return "", err
	}
	dir, err = os.MkdirTemp(c.Dir, "sa-"+name+"-")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), c.CAPEM, 0o644); err != nil {
		return "", err
	}
	return dir, os.WriteFile(filepath.Join(dir, "token"), []byte(token), 0o600)
}

type created struct {
	path string
	obj  any
}

// createAll POSTs each object, leaving those that exist already.
func (c *Cluster) createAll(ctx context.Context, objs []created) error {
	for _, o := range objs {
		err := c.Do(ctx, "POST", o.path, o.obj, nil)
		var apiErr *APIError
		if errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusConflict {
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}
