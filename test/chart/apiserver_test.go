package chart

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/localkube"
	"github.com/tetherhq/tether/internal/testutil/helmtest"
)

// kube runs kubectl as the API server's admin.
type kube struct {
	t *testing.T
	c *localkube.Cluster
}

func (k kube) run(args ...string) (string, error) {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := k.c.KubectlCommand(ctx, k.c.AdminKubeconfig, args...).CombinedOutput()
	return string(out), err
}

func (k kube) must(args ...string) string {
	k.t.Helper()
	out, err := k.run(args...)
	if err != nil {
		k.t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// canI asks the API server whether the ServiceAccount may do what args say.
func (k kube) canI(sa string, args ...string) bool {
	k.t.Helper()
	out, err := k.run(append([]string{"auth", "can-i", "--as=" + sa}, args...)...)
	switch strings.TrimSpace(lastLine(out)) {
	case "yes":
		return true
	case "no":
		return false
	}
	k.t.Fatalf("kubectl auth can-i %s: %v\n%s", strings.Join(args, " "), err, out)
	return false
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// TestTheAPIServerAcceptsTheChart applies every combination of options to a
// real API server, first as a server-side dry run, then for real, and then
// asks it what the agent's ServiceAccount may do.
func TestTheAPIServerAcceptsTheChart(t *testing.T) {
	h := helmtest.New(t)
	k := kube{t, apiServer(t)}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			k := kube{t, k.c}
			ns := c.namespace()
			for _, n := range append([]string{ns}, c.namespaces...) {
				k.must("create", "namespace", n)
			}
			out, err := h.Template(c.name, ns, c.values)
			if err != nil {
				t.Fatal(err)
			}
			objs, err := helmtest.Objects(out)
			if err != nil {
				t.Fatal(err)
			}
			manifest := filepath.Join(t.TempDir(), "manifest.yaml")
			if err := os.WriteFile(manifest, []byte(out), 0o600); err != nil {
				t.Fatal(err)
			}
			// The API server validates each object in full (its schema,
			// names, references to roles) without storing any.
			dry := k.must("apply", "--dry-run=server", "-f", manifest)
			if n := strings.Count(dry, "(server dry run)"); n != len(objs) {
				t.Errorf("the server dry run took %d of %d objects:\n%s", n, len(objs), dry)
			}
			applied := k.must("apply", "-f", manifest)
			if n := strings.Count(applied, " created"); n != len(objs) {
				t.Errorf("apply created %d of %d objects:\n%s", n, len(objs), applied)
			}
			for _, o := range objs {
				args := []string{"get", strings.ToLower(o.Kind()), o.Name(), "-o", "name"}
				if o.Namespace() != "" {
					args = append(args, "-n", o.Namespace())
				}
				k.must(args...)
			}
			if strings.HasPrefix(c.name, "agent") {
				checkAgentRBAC(t, k, c, ns)
			}
			if c.name == "hub-replicas" {
				checkReplicasRBAC(t, k, ns, c.name+"-hub")
			}
		})
	}
}

// checkAgentRBAC asks the API server what the release's ServiceAccount may
// do: impersonate, read the inventory, and nothing else.
func checkAgentRBAC(t *testing.T, k kube, c chartCase, ns string) {
	saName := c.serviceAccount()
	sa := "system:serviceaccount:" + ns + ":" + saName
	k.must("get", "serviceaccount", saName, "-n", ns)
	strict := strings.HasPrefix(c.name, "agent-strict")
	// Under strictMode, never the plain impersonate verb (checkStrict asks
	// for the constrained ones).
	impersonates := c.name != "agent-no-rbac" && !strict

	if got := k.canI(sa, "impersonate", "users"); got != impersonates && c.name != "agent-pinned" {
		t.Errorf("can %s impersonate users? %v, want %v", sa, got, impersonates)
	}
	if got := k.canI(sa, "impersonate", "groups"); got != impersonates && c.name != "agent-pinned" {
		t.Errorf("can %s impersonate groups? %v, want %v", sa, got, impersonates)
	}
	// kubectl auth can-i can't ask about what no API serves (a user extra,
	// or Argo CD's kinds where Argo CD isn't installed): ask the API server
	// itself.
	extra := access{verb: "impersonate", group: "authentication.k8s.io", resource: "userextras", subresource: "tether-request-id"}
	if got := k.allowed(sa, extra); got != impersonates {
		t.Errorf("can %s impersonate the extra tether-request-id? %v, want %v", sa, got, impersonates)
	}
	if k.allowed(sa, access{verb: "impersonate", group: "authentication.k8s.io", resource: "userextras", subresource: "scopes"}) {
		t.Errorf("%s may impersonate another user extra than tether-request-id", sa)
	}
	// What kubectl auth can-i shows: no Secrets, read or written.
	for _, q := range [][]string{{"get", "secrets"}, {"list", "secrets", "-A"}, {"create", "secrets"}, {"delete", "secrets"}, {"get", "secrets", "-n", "kube-system"}} {
		if k.canI(sa, q...) {
			t.Errorf("%s may %s", sa, q)
		}
	}
	// Nothing else: no writes, no other extras, no service accounts, no
	// way to widen its own rights.
	for _, a := range []access{
		{verb: "update", resource: "secrets", namespace: ns},
		{verb: "create", resource: "pods", namespace: ns}, {verb: "delete", resource: "pods"},
		{verb: "create", resource: "pods", subresource: "exec", namespace: ns},
		{verb: "update", group: "apps", resource: "deployments"}, {verb: "patch", group: "apps", resource: "deployments", namespace: ns},
		{verb: "delete", resource: "namespaces"}, {verb: "create", resource: "configmaps", namespace: ns},
		{verb: "impersonate", resource: "serviceaccounts"}, {verb: "impersonate", group: "authentication.k8s.io", resource: "uids"},
		{verb: "escalate", group: "rbac.authorization.k8s.io", resource: "clusterroles"},
		{verb: "bind", group: "rbac.authorization.k8s.io", resource: "clusterroles"},
		{verb: "create", group: "rbac.authorization.k8s.io", resource: "clusterrolebindings"},
		{verb: "create", group: "argoproj.io", resource: "applications", namespace: ns},
		{verb: "*", group: "*", resource: "*"},
	} {
		if k.allowed(sa, a) {
			t.Errorf("%s may %s: the agent's RBAC allows more than SPEC section 6 says", sa, a)
		}
	}

	if strict {
		checkStrict(t, k, c, ns, saName)
	}
	switch c.name {
	case "agent-no-rbac":
		if out := k.must("get", "clusterroles,clusterrolebindings,roles,rolebindings", "-A", "-l", "app.kubernetes.io/instance="+c.name, "-o", "name"); strings.TrimSpace(out) != "" {
			t.Errorf("rbac.create false made:\n%s", out)
		}
		if k.canI(sa, "list", "pods", "-A") {
			t.Errorf("rbac.create false, and %s may list pods", sa)
		}
	case "agent-namespaces", "no", "agent-strict":
		// Only Roles, and only in the allowed namespaces.
		roles := k.must("get", "roles,rolebindings,clusterroles,clusterrolebindings", "-A", "-l", "app.kubernetes.io/instance="+c.name,
			"-o", "jsonpath={range .items[*]}{.kind} {.metadata.namespace} {.metadata.name}{\"\\n\"}{end}")
		want := "ClusterRole - " + c.name + "-impersonate\n" +
			"ClusterRoleBinding - " + c.name + "-impersonate\n"
		for _, n := range c.namespaces {
			want += "Role " + n + " " + c.name + "-inventory\n" +
				"RoleBinding " + n + " " + c.name + "-inventory\n"
			if strict {
				want += "Role " + n + " " + c.name + "-ceiling\n" +
					"RoleBinding " + n + " " + c.name + "-ceiling\n" +
					"RoleBinding " + n + " " + c.name + "-access-1\n"
			}
		}
		if strict {
			want += "RoleBinding strict-a " + c.name + "-access-0\n"
		}
		if sorted(roles) != sorted(want) {
			t.Errorf("RBAC objects of the release:\n%s\nwant:\n%s", roles, want)
		}
		for _, n := range c.namespaces {
			for _, a := range specKinds {
				a.namespace = n
				if a.resource == "nodes" || a.resource == "namespaces" {
					if k.allowed(sa, a) {
						t.Errorf("with allowedNamespaces, %s may list %s", sa, a.resource)
					}
					continue
				}
				if !k.allowed(sa, a) {
					t.Errorf("%s may not watch %s in %s", sa, a, n)
				}
			}
		}
		for _, q := range [][]string{{"list", "pods", "-n", ns}, {"list", "pods", "-n", "default"}, {"list", "pods", "-A"}, {"list", "nodes"}, {"list", "namespaces"}} {
			if k.canI(sa, q...) {
				t.Errorf("with allowedNamespaces, %s may %s", sa, q)
			}
		}
	default:
		for _, a := range specKinds {
			for _, verb := range []string{"get", "list", "watch"} {
				a.verb = verb
				if !k.allowed(sa, a) {
					t.Errorf("%s may not %s cluster-wide, for the inventory", sa, a)
				}
			}
		}
	}

	if c.name == "agent-pinned" {
		checkPinned(t, k, ns, saName, sa)
	}
}

// checkPinned: with rbac.impersonate.groups and users set, only those may
// be impersonated, and a real request as the ServiceAccount that claims
// system:masters is refused by the API server.
func checkPinned(t *testing.T, k kube, ns, saName, sa string) {
	for _, q := range []struct {
		what string
		want bool
	}{
		{"groups/dev", true}, {"groups/ops", true}, {"users/alice", true}, {"users/bob", true},
		{"groups/system:masters", false}, {"groups/admins", false}, {"users/mallory", false}, {"users/admin", false},
	} {
		if got := k.canI(sa, "impersonate", q.what); got != q.want {
			t.Errorf("can %s impersonate %s? %v, want %v", sa, q.what, got, q.want)
		}
	}
	token := strings.TrimSpace(k.must("create", "token", saName, "-n", ns, "--duration=10m"))
	out, err := k.run("get", "namespaces", "--token="+token, "--as=alice", "--as-group=system:masters")
	if err == nil || !strings.Contains(out, "Forbidden") || !strings.Contains(out, "cannot impersonate") {
		t.Errorf("impersonating system:masters: %v\n%s\nwant the API server to refuse it", err, out)
	}
	// The same request in a pinned group gets past impersonation, to
	// alice's own (lack of) rights.
	out, err = k.run("get", "namespaces", "--token="+token, "--as=alice", "--as-group=dev")
	if err == nil || !strings.Contains(out, `User "alice" cannot list resource "namespaces"`) {
		t.Errorf("impersonating alice in dev: %v\n%s\nwant alice refused by RBAC", err, out)
	}
	out, err = k.run("get", "namespaces", "--token="+token, "--as=mallory")
	if err == nil || !strings.Contains(out, "Forbidden") || !strings.Contains(out, "cannot impersonate") {
		t.Errorf("impersonating mallory: %v\n%s\nwant the API server to refuse it", err, out)
	}
}

func sorted(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i := range lines {
		f := strings.Fields(lines[i])
		if len(f) == 2 { // cluster-scoped: no namespace
			f = []string{f[0], "-", f[1]}
		}
		lines[i] = strings.Join(f, " ")
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// access is a question for a SubjectAccessReview: about a resource, or
// with path about a non-resource URL.
type access struct {
	verb, group, resource, subresource, namespace, name string
	path                                                string
}

func (a access) String() string {
	if a.path != "" {
		return a.verb + " " + a.path
	}
	s := a.verb + " " + a.resource
	if a.subresource != "" {
		s += "/" + a.subresource
	}
	if a.group != "" {
		s += "." + a.group
	}
	return s
}

// specKinds are the kinds SPEC section 5 says the agent watches.
var specKinds = []access{
	{verb: "watch", resource: "nodes"},
	{verb: "watch", resource: "namespaces"},
	{verb: "watch", resource: "pods"},
	{verb: "watch", resource: "services"},
	{verb: "watch", group: "apps", resource: "deployments"},
	{verb: "watch", group: "apps", resource: "statefulsets"},
	{verb: "watch", group: "apps", resource: "daemonsets"},
	{verb: "watch", group: "batch", resource: "jobs"},
	{verb: "watch", group: "batch", resource: "cronjobs"},
	{verb: "watch", group: "networking.k8s.io", resource: "ingresses"},
	{verb: "watch", group: "argoproj.io", resource: "applications"},
	{verb: "watch", group: "networking.istio.io", resource: "gateways"},
}

// allowed asks the API server, with a SubjectAccessReview, whether user
// may do a.
func (k kube) allowed(user string, a access) bool {
	k.t.Helper()
	return k.allowedAs(user, groups(user), a)
}

// allowedAs is allowed for a user in groups (besides
// system:authenticated, which it adds).
func (k kube) allowedAs(user string, groups []string, a access) bool {
	k.t.Helper()
	spec := map[string]any{
		"user":   user,
		"groups": append([]string{"system:authenticated"}, groups...),
		"resourceAttributes": map[string]any{
			"verb": a.verb, "group": a.group, "resource": a.resource,
			"subresource": a.subresource, "namespace": a.namespace, "name": a.name,
		},
	}
	if a.path != "" {
		delete(spec, "resourceAttributes")
		spec["nonResourceAttributes"] = map[string]any{"verb": a.verb, "path": a.path}
	}
	sar := map[string]any{
		"apiVersion": "authorization.k8s.io/v1",
		"kind":       "SubjectAccessReview",
		"spec":       spec,
	}
	var out struct {
		Status struct{ Allowed bool }
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := k.c.Do(ctx, "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", sar, &out); err != nil {
		k.t.Fatal(err)
	}
	return out.Status.Allowed
}

// groups are the groups the API server gives a service account's user,
// besides system:authenticated.
func groups(user string) []string {
	var g []string
	if rest, ok := strings.CutPrefix(user, "system:serviceaccount:"); ok {
		ns, _, _ := strings.Cut(rest, ":")
		g = append(g, "system:serviceaccounts", "system:serviceaccounts:"+ns)
	}
	return g
}
