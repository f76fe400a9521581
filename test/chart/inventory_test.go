package chart

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tetherhq/tether/internal/testutil/helmtest"
)

// rulesOf lists "resource.group" of each rule of a Role or ClusterRole.
func rulesOf(t *testing.T, o helmtest.Object) []string {
	t.Helper()
	var r struct {
		Rules []struct{ APIGroups, Resources, Verbs []string }
	}
	decode(t, o, &r)
	var out []string
	for _, ru := range r.Rules {
		if !slices.Equal(ru.Verbs, []string{"get", "list", "watch"}) {
			t.Errorf("%s %s: verbs %v, want get, list and watch", o.Kind(), o.Name(), ru.Verbs)
		}
		for _, g := range ru.APIGroups {
			for _, res := range ru.Resources {
				out = append(out, res+"."+g)
			}
		}
	}
	return out
}

func agentEnv(t *testing.T, objs []helmtest.Object) func(string) string {
	t.Helper()
	var d deployment
	decode(t, only(t, objs, "Deployment"), &d)
	return func(name string) string { return env(d.Spec.Template.Spec.Containers[0], name) }
}

// TestInventoryValues: inventory.enabled, extraKinds and clusterScoped
// (issue 36) as the agent's settings and its RBAC.
func TestInventoryValues(t *testing.T) {
	h := helmtest.New(t)

	// Off: no inventory RBAC at all, and the agent told so.
	objs := render(t, h, "t", "tether", agentValues+"allowedNamespaces: [a]\ninventory:\n  enabled: false\n  clusterScoped: true\n")
	for _, o := range objs {
		if strings.HasPrefix(o.Name(), "t-inventory") {
			t.Errorf("inventory off: %s %s rendered", o.Kind(), o.Name())
		}
	}
	if got := agentEnv(t, objs)("TETHER_INVENTORY"); got != "false" {
		t.Errorf("inventory off: TETHER_INVENTORY=%q", got)
	}
	if got := agentEnv(t, render(t, h, "t", "tether", agentValues))("TETHER_INVENTORY"); got != "" {
		t.Errorf("by default TETHER_INVENTORY=%q, want it unset", got)
	}

	// Extra kinds: the setting, and a grant beside the default kinds, in
	// the ClusterRole or in each Role.
	extra := "inventory:\n  extraKinds: [cert-manager.io/v1/certificates, v1/configmaps]\n"
	for _, tc := range []struct{ name, values, kind string }{
		{"cluster-wide", agentValues + extra, "ClusterRole"},
		{"in allowed namespaces", agentValues + extra + "allowedNamespaces: [a, b]\n", "Role"},
	} {
		objs := render(t, h, "t", "tether", tc.values)
		if got := agentEnv(t, objs)("TETHER_INVENTORY_KINDS_EXTRA"); got != "cert-manager.io/v1/certificates,v1/configmaps" {
			t.Errorf("%s: TETHER_INVENTORY_KINDS_EXTRA=%q", tc.name, got)
		}
		n := 0
		for _, o := range objs {
			if o.Kind() == tc.kind && o.Name() == "t-inventory" {
				n++
				got := rulesOf(t, o)
				if !slices.Contains(got, "certificates.cert-manager.io") || !slices.Contains(got, "configmaps.") || !slices.Contains(got, "pods.") {
					t.Errorf("%s: %s grants %q", tc.name, tc.kind, got)
				}
			}
		}
		if n == 0 {
			t.Errorf("%s: no %s t-inventory", tc.name, tc.kind)
		}
	}

	// clusterScoped, with allowedNamespaces: a ClusterRole for nodes and
	// namespaces, nothing else; without allowedNamespaces the inventory's
	// ClusterRole has them already.
	var cluster []helmtest.Object
	for _, o := range render(t, h, "t", "tether", agentValues+"allowedNamespaces: [a]\ninventory:\n  clusterScoped: true\n") {
		if strings.HasPrefix(o.Name(), "t-inventory-cluster") {
			cluster = append(cluster, o)
		}
	}
	if len(cluster) != 2 {
		t.Fatalf("clusterScoped: %d objects named t-inventory-cluster, want a ClusterRole and its binding", len(cluster))
	}
	for _, o := range cluster {
		if o.Kind() == "ClusterRole" {
			if got := rulesOf(t, o); !slices.Equal(got, []string{"nodes.", "namespaces."}) {
				t.Errorf("clusterScoped ClusterRole grants %q, want nodes and namespaces only", got)
			}
		}
	}
	for _, o := range render(t, h, "t", "tether", agentValues+"inventory:\n  clusterScoped: true\n") {
		if o.Name() == "t-inventory-cluster" {
			t.Errorf("clusterScoped without allowedNamespaces: %s %s", o.Kind(), o.Name())
		}
	}

	// Secrets are refused, by the template or by the schema.
	for _, v := range []string{"[v1/secrets]", "[v1/configmaps, v1/secrets]", "[/v1/secrets]"} {
		_, err := h.Template("t", "tether", agentValues+"inventory:\n  extraKinds: "+v+"\n")
		if err == nil || !strings.Contains(err.Error(), "secrets") {
			t.Errorf("extraKinds %s: %v, want a refusal naming secrets", v, err)
		}
	}
	for _, v := range []string{"[configmaps]", "[a/b/c/d]", "[Cert-Manager.io/v1/certificates]"} {
		if _, err := h.Template("t", "tether", agentValues+"inventory:\n  extraKinds: "+v+"\n"); err == nil {
			t.Errorf("extraKinds %s accepted", v)
		}
	}
}

// TestTheAPIServerTakesTheInventoryValues installs the chart with the
// inventory's values into a real API server and asks it what the agent's
// ServiceAccount may read: with clusterScoped, nodes and namespaces besides
// the allowed namespaces' kinds and the extra kinds; with the inventory
// off, nothing.
func TestTheAPIServerTakesTheInventoryValues(t *testing.T) {
	h := helmtest.New(t)
	k := kube{t, apiServer(t)}
	install := func(t *testing.T, name, values string, namespaces ...string) (sa string) {
		k := kube{t, k.c}
		ns := "ns-" + name
		for _, n := range append([]string{ns}, namespaces...) {
			k.must("create", "namespace", n)
		}
		out, err := h.Template(name, ns, values)
		if err != nil {
			t.Fatal(err)
		}
		manifest := filepath.Join(t.TempDir(), "manifest.yaml")
		if err := os.WriteFile(manifest, []byte(out), 0o600); err != nil {
			t.Fatal(err)
		}
		k.must("apply", "-f", manifest)
		return "system:serviceaccount:" + ns + ":" + name + "-agent"
	}

	t.Run("cluster-scoped", func(t *testing.T) {
		k := kube{t, k.c}
		sa := install(t, "inv-scoped", agentValues+"allowedNamespaces: [inv-scoped-a]\ninventory:\n  clusterScoped: true\n  extraKinds: [v1/configmaps, cert-manager.io/v1/certificates]\n", "inv-scoped-a")
		for _, tc := range []struct {
			a    access
			want bool
		}{
			{access{verb: "watch", resource: "nodes"}, true},
			{access{verb: "list", resource: "namespaces"}, true},
			{access{verb: "list", resource: "pods", namespace: "inv-scoped-a"}, true},
			{access{verb: "watch", resource: "configmaps", namespace: "inv-scoped-a"}, true},
			{access{verb: "list", group: "cert-manager.io", resource: "certificates", namespace: "inv-scoped-a"}, true},
			{access{verb: "list", group: "apps", resource: "replicasets", namespace: "inv-scoped-a"}, true},
			{access{verb: "list", resource: "pods"}, false},
			{access{verb: "list", resource: "configmaps", namespace: "default"}, false},
			{access{verb: "list", resource: "secrets", namespace: "inv-scoped-a"}, false},
			{access{verb: "delete", resource: "namespaces"}, false},
			{access{verb: "update", resource: "nodes"}, false},
		} {
			if got := k.allowed(sa, tc.a); got != tc.want {
				t.Errorf("may %s %v? %v, want %v", sa, tc.a, got, tc.want)
			}
		}
	})
	t.Run("off", func(t *testing.T) {
		k := kube{t, k.c}
		sa := install(t, "inv-off", agentValues+"inventory:\n  enabled: false\n")
		for _, a := range []access{{verb: "list", resource: "pods"}, {verb: "list", resource: "nodes"}, {verb: "watch", group: "apps", resource: "deployments"}} {
			if k.allowed(sa, a) {
				t.Errorf("inventory off, and %s may %v", sa, a)
			}
		}
		if !k.canI(sa, "impersonate", "users") {
			t.Errorf("inventory off, and %s may no longer impersonate", sa)
		}
	})
}
