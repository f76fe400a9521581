package chart

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetherhq/tether/internal/testutil/helmtest"
)

// TestProxyValues: proxy.enabled (issue 36, SPEC section 9) as the agent's
// TETHER_PROXY. With the proxy off the impersonation RBAC stays, for the
// hub's access reviews, which impersonate each person to filter the
// inventory (decision 030); both halves off is refused at render.
func TestProxyValues(t *testing.T) {
	h := helmtest.New(t)
	if got := agentEnv(t, render(t, h, "t", "tether", agentValues))("TETHER_PROXY"); got != "" {
		t.Errorf("by default TETHER_PROXY=%q, want it unset", got)
	}
	objs := render(t, h, "t", "tether", agentValues+"proxy:\n  enabled: false\n")
	if got := agentEnv(t, objs)("TETHER_PROXY"); got != "false" {
		t.Errorf("proxy off: TETHER_PROXY=%q, want false", got)
	}
	var impersonate, inventory bool
	for _, o := range objs {
		impersonate = impersonate || (o.Kind() == "ClusterRole" && o.Name() == "t-impersonate")
		inventory = inventory || strings.HasPrefix(o.Name(), "t-inventory")
	}
	if !impersonate || !inventory {
		t.Errorf("proxy off: impersonation RBAC %v, inventory RBAC %v; want both, for the access reviews and the inventory", impersonate, inventory)
	}

	_, err := h.Template("t", "tether", agentValues+"proxy:\n  enabled: false\ninventory:\n  enabled: false\n")
	if err == nil || !strings.Contains(err.Error(), "proxy.enabled and inventory.enabled are both false: the agent would do nothing") {
		t.Errorf("both halves off: %v, want a refusal saying so", err)
	}
	for _, v := range []string{"proxy:\n  enabled: \"no\"\n", "proxy:\n  on: true\n"} {
		if _, err := h.Template("t", "tether", agentValues+v); err == nil {
			t.Errorf("%q accepted", v)
		}
	}
}

// TestStrictModeWithTheProxyOff: under strictMode with the proxy off, the
// API server itself holds the proxy off. The agent's ServiceAccount may act
// as a person only to create a SelfSubjectAccessReview (the hub's access
// reviews, which filter the inventory) and GET /version (the agent's check
// that constrained impersonation holds), so even a request the hub marked
// as its own gets nothing else as a person. Checked on the real API
// server, with kubectl as the account.
func TestStrictModeWithTheProxyOff(t *testing.T) {
	h := helmtest.New(t)
	k := kube{t, apiServer(t)}
	h.Kubeconfig = k.c.AdminKubeconfig
	const name, ns, allowed = "pxoff", "ns-pxoff", "pxoff-a"
	for _, n := range []string{ns, allowed} {
		k.must("create", "namespace", n)
	}
	values := agentValues + "strictMode: true\nallowedNamespaces: [" + allowed + "]\nproxy:\n  enabled: false\n"
	out, err := h.Template(name, ns, values)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "name: "+name+"-ceiling") {
		t.Errorf("the proxy off, and the ceiling's Roles rendered:\n%s", out)
	}
	if n := notes(t, h, name, ns, values); !strings.Contains(n, "strictMode with the proxy off: the agent's ServiceAccount may act as a person only to\nreview their access") {
		t.Errorf("the notes don't say what strictMode grants with the proxy off:\n%s", n)
	}
	manifest := filepath.Join(t.TempDir(), "manifest.yaml")
	if err := os.WriteFile(manifest, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	k.must("apply", "-f", manifest)
	sa := "system:serviceaccount:" + ns + ":" + name + "-agent"
	const ui = "impersonate:user-info"
	for _, tc := range []struct {
		a    access
		want bool
	}{
		{access{verb: ui, group: "authentication.k8s.io", resource: "users", name: "alice"}, true},
		{access{verb: ui, group: "authentication.k8s.io", resource: "groups", name: "dev"}, true},
		{access{verb: onVerb("create"), group: "authorization.k8s.io", resource: "selfsubjectaccessreviews"}, true},
		{access{verb: onVerb("get"), path: "/version"}, true},
		{access{verb: onVerb("get"), resource: "configmaps", namespace: allowed}, false},
		{access{verb: onVerb("list"), resource: "pods", namespace: allowed}, false},
		{access{verb: onVerb("create"), resource: "pods", subresource: "exec", namespace: allowed}, false},
		{access{verb: onVerb("get"), path: "/api"}, false},
		{access{verb: onVerb("create"), group: "authorization.k8s.io", resource: "selfsubjectrulesreviews"}, false},
		{access{verb: ui, group: "authentication.k8s.io", resource: "userextras", subresource: "tetherhq.github.io/request-id", name: "1"}, false},
		{access{verb: "impersonate", resource: "users"}, false},
	} {
		if got := k.allowed(sa, tc.a); got != tc.want {
			t.Errorf("may %s %v? %v, want %v", sa, tc.a, got, tc.want)
		}
	}

	token := strings.TrimSpace(k.must("create", "token", name+"-agent", "-n", ns, "--duration=10m"))
	k.must("create", "role", "pod-reader", "-n", allowed, "--verb=list", "--resource=pods")
	k.must("create", "rolebinding", "carol-reads", "-n", allowed, "--role=pod-reader", "--user=carol")
	// The hub's access review as carol goes through, and answers for her.
	if out, err := k.run("--token="+token, "--as=carol", "auth", "can-i", "list", "pods", "-n", allowed); err != nil || strings.TrimSpace(out) != "yes" {
		t.Errorf("an access review as carol: %v\n%s\nwant yes", err, out)
	}
	// Her request itself does not, though her RBAC allows it.
	want := `cannot impersonate-on:user-info:list resource "pods" in API group "" in the namespace "` + allowed + `"`
	if out, err := k.run("--token="+token, "--as=carol", "get", "pods", "-n", allowed); err == nil || !strings.Contains(out, want) {
		t.Errorf("carol's request as the account: %v\n%s\nwant the API server's %q", err, out, want)
	}
}
