package chart

import (
	"strings"
	"testing"
)

// personVerbs are the verbs of the ceiling's default rules.
var personVerbs = []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}

// onVerb is the constrained impersonation verb for a person's verb.
func onVerb(verb string) string { return "impersonate-on:user-info:" + verb }

// checkStrict asks the API server what strictMode grants the agent's
// ServiceAccount: constrained impersonation of people, with the request id
// extra, only inside the ceiling, and what Tether asks as a person
// everywhere (access reviews, discovery); then makes real requests as the
// account, impersonating a person, and sees the API server enforce it.
func checkStrict(t *testing.T, k kube, c chartCase, ns, saName string) {
	sa := "system:serviceaccount:" + ns + ":" + saName
	const ui = "impersonate:user-info"
	must := []access{
		{verb: ui, group: "authentication.k8s.io", resource: "users", name: "alice"},
		{verb: ui, group: "authentication.k8s.io", resource: "users", name: "tether:ceiling-check"},
		{verb: ui, group: "authentication.k8s.io", resource: "groups", name: "dev"},
		{verb: ui, group: "authentication.k8s.io", resource: "userextras", subresource: "tetherhq.github.io/request-id", name: "0123"},
		{verb: onVerb("create"), group: "authorization.k8s.io", resource: "selfsubjectaccessreviews"},
		{verb: onVerb("create"), group: "authorization.k8s.io", resource: "selfsubjectrulesreviews"},
		{verb: onVerb("create"), group: "authentication.k8s.io", resource: "selfsubjectreviews"},
		{verb: onVerb("get"), path: "/version"}, {verb: onVerb("get"), path: "/api"}, {verb: onVerb("get"), path: "/api/v1"},
		{verb: onVerb("get"), path: "/apis"}, {verb: onVerb("get"), path: "/apis/apps/v1"},
		{verb: onVerb("get"), path: "/openapi/v2"}, {verb: onVerb("get"), path: "/openapi/v3/apis/apps/v1"},
	}
	mustNot := []access{
		// The plain verb, for anyone or anything.
		{verb: "impersonate", resource: "users"}, {verb: "impersonate", resource: "groups"},
		{verb: "impersonate", resource: "serviceaccounts"},
		{verb: "impersonate", group: "authentication.k8s.io", resource: "userextras", subresource: "tether-request-id"},
		{verb: "impersonate", group: "authentication.k8s.io", resource: "users"},
		// Other identities and extras.
		{verb: "impersonate:serviceaccount", group: "authentication.k8s.io", resource: "serviceaccounts"},
		{verb: "impersonate:scheduled-node", group: "authentication.k8s.io", resource: "nodes"},
		{verb: ui, group: "authentication.k8s.io", resource: "uids"},
		{verb: ui, group: "authentication.k8s.io", resource: "userextras", subresource: "example.com/scopes"},
		// Non-resource URLs beyond discovery.
		{verb: onVerb("get"), path: "/metrics"}, {verb: onVerb("get"), path: "/logs/"},
		{verb: onVerb("get"), path: "/debug/pprof/"}, {verb: onVerb("post"), path: "/version"},
		// Nothing outside the allowed namespaces, nor across them.
		{verb: onVerb("create"), resource: "namespaces"}, {verb: onVerb("delete"), resource: "namespaces", name: "kube-system"},
		{verb: onVerb("create"), resource: "secrets", namespace: "kube-system"},
		{verb: onVerb("create"), group: "rbac.authorization.k8s.io", resource: "clusterrolebindings"},
		{verb: onVerb("create"), group: "authorization.k8s.io", resource: "subjectaccessreviews"},
		{verb: onVerb("*"), group: "*", resource: "*"},
	}
	inside := []string{}
	switch c.name {
	case "agent-strict":
		inside = c.namespaces
		for _, n := range []string{ns, "default", "kube-system"} {
			for _, v := range personVerbs {
				mustNot = append(mustNot, access{verb: onVerb(v), resource: "configmaps", namespace: n})
			}
			mustNot = append(mustNot, access{verb: onVerb("create"), resource: "pods", subresource: "exec", namespace: n})
		}
		mustNot = append(mustNot, access{verb: onVerb("get"), resource: "nodes"},
			access{verb: onVerb("list"), resource: "pods"}, access{verb: onVerb("list"), group: "apps", resource: "deployments"})
	case "agent-strict-cluster":
		for _, n := range []string{ns, "default", ""} {
			must = append(must,
				access{verb: onVerb("list"), resource: "configmaps", namespace: n},
				access{verb: onVerb("get"), resource: "pods", subresource: "log", namespace: n})
			mustNot = append(mustNot,
				access{verb: onVerb("create"), resource: "configmaps", namespace: n},
				access{verb: onVerb("get"), resource: "secrets", namespace: n},
				access{verb: onVerb("create"), resource: "pods", subresource: "exec", namespace: n})
		}
		must = append(must, access{verb: onVerb("list"), resource: "nodes"})
		mustNot = append(mustNot,
			access{verb: onVerb("delete"), resource: "nodes"},
			access{verb: ui, group: "authentication.k8s.io", resource: "users", name: "mallory"},
			access{verb: ui, group: "authentication.k8s.io", resource: "groups", name: "system:masters"})
	}
	for _, n := range inside {
		for _, v := range personVerbs {
			must = append(must,
				access{verb: onVerb(v), resource: "configmaps", namespace: n},
				access{verb: onVerb(v), group: "apps", resource: "deployments", namespace: n})
		}
		// exec, attach and port-forward (create, and get for the
		// WebSocket upgrade), logs.
		for _, sub := range []string{"exec", "attach", "portforward"} {
			must = append(must, access{verb: onVerb("create"), resource: "pods", subresource: sub, namespace: n},
				access{verb: onVerb("get"), resource: "pods", subresource: sub, namespace: n})
		}
		must = append(must, access{verb: onVerb("get"), resource: "pods", subresource: "log", namespace: n})
	}
	for _, a := range must {
		if !k.allowed(sa, a) {
			t.Errorf("under strictMode, %s may not %s in %q", sa, a, a.namespace)
		}
	}
	for _, a := range mustNot {
		if k.allowed(sa, a) {
			t.Errorf("under strictMode, %s may %s in %q", sa, a, a.namespace)
		}
	}

	token := strings.TrimSpace(k.must("create", "token", saName, "-n", ns, "--duration=10m"))
	// as runs kubectl as the agent's account, impersonating person in
	// groups, with a request id, as the hub does under strictMode.
	as := func(person string, groups []string, args ...string) (string, error) {
		a := []string{"--token=" + token, "--as=" + person, "--as-user-extra=tetherhq.github.io/request-id=" + c.name}
		for _, g := range groups {
			a = append(a, "--as-group="+g)
		}
		return k.run(append(a, args...)...)
	}
	switch c.name {
	case "agent-strict":
		checkStrictAccess(t, k)
		// carol's own RBAC allows everything, everywhere: the ceiling
		// alone stops her outside strict-a and strict-b.
		k.must("create", "clusterrolebinding", "carol-admin", "--clusterrole=cluster-admin", "--user=carol")
		for _, n := range c.namespaces {
			if out, err := as("carol", nil, "create", "configmap", "inside", "-n", n); err != nil {
				t.Errorf("carol creates a configmap in %s: %v\n%s", n, err, out)
			}
		}
		for _, q := range []struct {
			args []string
			want string
		}{
			{[]string{"get", "configmaps", "-n", ns},
				`configmaps is forbidden: User "` + sa + `" cannot impersonate-on:user-info:list resource "configmaps" in API group "" in the namespace "` + ns + `"`},
			{[]string{"create", "configmap", "outside", "-n", "default"},
				`cannot impersonate-on:user-info:create resource "configmaps" in API group "" in the namespace "default"`},
			{[]string{"get", "configmaps", "-A"},
				`cannot impersonate-on:user-info:list resource "configmaps" in API group "" at the cluster scope`},
			{[]string{"create", "namespace", "carols"},
				`cannot impersonate-on:user-info:create resource "namespaces" in API group "" at the cluster scope`},
			{[]string{"get", "--raw", "/metrics"},
				`cannot impersonate-on:user-info:get path "/metrics"`},
		} {
			out, err := as("carol", nil, q.args...)
			if err == nil || !strings.Contains(out, q.want) {
				t.Errorf("kubectl %s as carol: %v\n%s\nwant the API server's %q", strings.Join(q.args, " "), err, out, q.want)
			}
		}
		// Discovery and carol's own reviews work wherever she asks.
		for _, q := range [][]string{{"version"}, {"api-resources"}, {"auth", "can-i", "delete", "namespaces"}, {"auth", "whoami"}} {
			if out, err := as("carol", nil, q...); err != nil {
				t.Errorf("kubectl %s as carol: %v\n%s", strings.Join(q, " "), err, out)
			}
		}
		// Without the extra's domain prefix, constrained impersonation
		// refuses the request whatever the rules say (decision 027).
		out, err := k.run("--token="+token, "--as=carol", "--as-user-extra=tether-request-id=1", "get", "configmaps", "-n", c.namespaces[0])
		if err == nil || !strings.Contains(out, "must be a domain-prefixed path") {
			t.Errorf("the plain tether-request-id extra: %v\n%s\nwant the API server to refuse it", err, out)
		}
	case "agent-strict-cluster":
		if out, err := as("alice", []string{"dev"}, "get", "configmaps", "-n", "default"); err != nil {
			t.Errorf("alice lists configmaps through the ceiling: %v\n%s", err, out)
		}
		if out, err := as("mallory", nil, "get", "configmaps", "-n", "default"); err == nil || !strings.Contains(out, `cannot impersonate:user-info resource "users"`) {
			t.Errorf("impersonating mallory, who isn't pinned: %v\n%s", err, out)
		}
		if out, err := as("alice", []string{"system:masters"}, "get", "configmaps", "-n", "default"); err == nil || !strings.Contains(out, `cannot impersonate:user-info resource "groups"`) {
			t.Errorf("impersonating alice in system:masters: %v\n%s", err, out)
		}
		// access: a ClusterRoleBinding gives alice her reads.
		if !k.allowedAs("alice", nil, access{verb: "list", resource: "pods", namespace: "default"}) {
			t.Error("access did not let alice list pods cluster-wide")
		}
	}
}

// checkStrictAccess asks the API server what the agent-strict case's access
// entries give people: a group cluster-admin in one namespace, and a group
// and a user read access in every allowed namespace, and nothing anywhere
// else.
func checkStrictAccess(t *testing.T, k kube) {
	for _, q := range []struct {
		user   string
		groups []string
		a      access
		want   bool
	}{
		{"pat", []string{"platform"}, access{verb: "create", resource: "pods", namespace: "strict-a"}, true},
		{"pat", []string{"platform"}, access{verb: "delete", resource: "secrets", namespace: "strict-a"}, true},
		{"pat", []string{"platform"}, access{verb: "create", resource: "pods", namespace: "strict-b"}, false},
		{"pat", []string{"platform"}, access{verb: "list", resource: "pods"}, false},
		{"sam", []string{"sre"}, access{verb: "list", resource: "pods", namespace: "strict-a"}, true},
		{"sam", []string{"sre"}, access{verb: "list", resource: "pods", namespace: "strict-b"}, true},
		{"sam", []string{"sre"}, access{verb: "create", resource: "pods", namespace: "strict-b"}, false},
		{"sam", []string{"sre"}, access{verb: "list", resource: "pods", namespace: "default"}, false},
		{"bob", nil, access{verb: "get", resource: "configmaps", namespace: "strict-b"}, true},
		{"bob", nil, access{verb: "get", resource: "configmaps", namespace: "default"}, false},
		{"pat", []string{"dev"}, access{verb: "list", resource: "pods", namespace: "strict-a"}, false},
	} {
		if got := k.allowedAs(q.user, q.groups, q.a); got != q.want {
			t.Errorf("may %s in %v %s in %q? %v, want %v", q.user, q.groups, q.a, q.a.namespace, got, q.want)
		}
	}
}
