package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/localkube"
	"github.com/tetherhq/tether/internal/testutil/helmtest"
)

// requestIDExtra is the user extra that carries the hub's request id under
// strictMode (the chart's tether.requestIdExtra).
const requestIDExtra = "tetherhq.github.io/request-id"

// applyAgentRBAC renders the agent chart's ServiceAccount and RBAC with
// values, applies them to the API server of kubeconfig, and returns a
// directory laid out as the agent pod's service account directory.
func applyAgentRBAC(t *testing.T, kubeconfig, release, ns, values string) (saDir string) {
	t.Helper()
	h := helmtest.New(t)
	manifest, err := h.Template(release, ns, values)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := helmtest.Objects(manifest)
	if err != nil {
		t.Fatal(err)
	}
	// All but the Deployment: the agent runs as a process here, with the
	// account's token.
	list := map[string]any{"apiVersion": "v1", "kind": "List"}
	var items []any
	for _, o := range objs {
		if o.Kind() != "Deployment" {
			items = append(items, o)
		}
	}
	list["items"] = items
	b, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "rbac.json")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := kubectl(t, kubeconfig, "apply", "-f", file); err != nil {
		t.Fatalf("apply the chart's RBAC: %v\n%s", err, out)
	}
	token, err := kubectl(t, kubeconfig, "create", "token", release+"-agent", "-n", ns, "--duration=1h")
	if err != nil {
		t.Fatalf("kubectl create token: %v\n%s", err, token)
	}
	saDir = t.TempDir()
	if err := os.WriteFile(filepath.Join(saDir, "token"), []byte(strings.TrimSpace(token)), 0o600); err != nil {
		t.Fatal(err)
	}
	return saDir
}

// TestStrictModeCeiling installs the chart's RBAC with strictMode and
// allowedNamespaces into the real API server, runs the real agent with it,
// and makes real requests as the agent's account impersonating a person
// whose own RBAC allows everything everywhere, with the headers the hub
// sends: inside the allowed namespace everything works, exec, logs and
// port-forward included; outside, the API server refuses, and its message
// reaches kubectl intact. access makes people's bindings.
func TestStrictModeCeiling(t *testing.T) {
	inside, outside := unique("ceiling-in"), unique("ceiling-out")
	ns := unique("ceiling-agent")
	setUpPeople(t, inside, outside) // tether:admins: cluster-admin everywhere
	admin(t, "create", "namespace", ns)
	admin(t, "create", "clusterrole", "ceiling-e2e-editor", "--verb=get,list,watch,create,delete", "--resource=configmaps,pods,pods/log,pods/exec")
	const release, name = "ceiling-e2e", "ceiling"
	sa := "system:serviceaccount:" + ns + ":" + release + "-agent"

	// Before the chart, pat in platform may do nothing in inside.
	if out, err := kubectl(t, cluster.AdminKubeconfig, "auth", "can-i", "create", "configmaps", "-n", inside, "--as=pat", "--as-group=platform"); err == nil || strings.TrimSpace(out) != "no" {
		t.Fatalf("before access, may pat create configmaps in %s? %v %s", inside, err, out)
	}
	saDir := applyAgentRBAC(t, cluster.AdminKubeconfig, release, ns, `
mode: agent
clusterName: `+name+`
agent: {hubUrl: https://tether.example.com, tokenSecret: agent-token}
strictMode: true
allowedNamespaces: [`+inside+`]
inventory: {clusterScoped: true}
access:
  - {group: platform, clusterRole: ceiling-e2e-editor}
`)
	if err := os.WriteFile(filepath.Join(saDir, "ca.crt"), cluster.CAPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	token, err := os.ReadFile(filepath.Join(saDir, "token"))
	if err != nil {
		t.Fatal(err)
	}

	// The real agent, in strict mode, finds the ceiling enforced, and the
	// hub's probes (as the account itself) keep the cluster Ready.
	h, hubURL := hub(t, nil, name)
	env := agentEnv(t, name, hubURL, agentToken, saDir)
	env["TETHER_STRICT_MODE"], env["TETHER_ALLOWED_NAMESPACES"] = "true", inside // as the chart sets them
	a := start(t, "agent "+name, env, "agent")
	a.waitFor(t, 10*time.Second, "strictMode: the API server enforces the ceiling (constrained impersonation)")
	a.waitFor(t, 10*time.Second, `Connected to `+hubURL+` as "`+name+`"`)
	h.waitFor(t, 15*time.Second, `A cluster is Ready cluster="`+name+`" kubernetesVersion=`+cluster.Version)
	if !auditHas(t, func(e auditEvent) bool {
		return e.User.Username == sa && e.ImpersonatedUser.Username == "tether:ceiling-check" && e.RequestURI == "/version"
	}) {
		t.Errorf("the API server's audit log has no /version from %s as tether:ceiling-check", sa)
	}

	// person runs kubectl as the hub would under strictMode: the agent's
	// token, the person and their groups impersonated, and a request id.
	person := func(user string, groups ...string) func(env []string, args ...string) *exec.Cmd {
		flags := []string{"--token=" + string(token), "--as=" + user, "--as-user-extra=" + requestIDExtra + "=" + strings.ToLower(t.Name())}
		for _, g := range groups {
			flags = append(flags, "--as-group="+g)
		}
		return func(env []string, args ...string) *exec.Cmd {
			cmd := cluster.KubectlCommand(t.Context(), cluster.AdminKubeconfig, append(flags, args...)...)
			cmd.Env = append(cmd.Env, env...)
			return cmd
		}
	}
	run := func(k func([]string, ...string) *exec.Cmd, args ...string) (string, error) {
		var out bytes.Buffer
		cmd := k(nil, args...)
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	root := person("admin", "tether:admins")

	// Inside: a person's own RBAC decides, and all of it works.
	if out, err := run(root, "create", "configmap", "hello", "-n", inside, "--from-literal=hello=world"); err != nil {
		t.Fatalf("admin creates a configmap in %s: %v\n%s", inside, err, out)
	}
	if out, err := run(root, "get", "configmap", "hello", "-n", inside, "-o", "jsonpath={.data.hello}"); err != nil || out != "world" {
		t.Errorf("admin reads it: %v %q", err, out)
	}
	if !auditHas(t, func(e auditEvent) bool {
		return e.User.Username == sa && e.ImpersonatedUser.Username == "admin" && len(e.ImpersonatedUser.Extra[requestIDExtra]) == 1
	}) {
		t.Errorf("the API server's audit log has no request from %s as admin with the extra %s", sa, requestIDExtra)
	}
	createPod(t, inside, "clock", map[string]any{"command": []string{"sh", "-c", "echo hello; while true; do sleep 1; done"}, "workingDir": t.TempDir()}, "Always")
	if out, err := run(root, "wait", "-n", inside, "pod/clock", "--for=condition=Ready", "--timeout=60s"); err != nil {
		t.Fatalf("wait for the pod: %v\n%s", err, out)
	}
	if out, err := run(root, "logs", "-n", inside, "clock"); err != nil || !strings.HasPrefix(out, "hello\n") {
		t.Errorf("kubectl logs inside: %v %q", err, out)
	}
	for _, tr := range transports {
		cmd := root(tr.env, "exec", "-i", "-n", inside, "clock", "--", "sh", "-c", "cat; exit 3")
		cmd.Stdin = strings.NewReader("ping\n")
		out, err := cmd.Output()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 3 || string(out) != "ping\n" {
			t.Errorf("kubectl exec inside over %s: %v, %q; want ping and status 3", tr.name, err, out)
		}
	}
	portForward(t, inside, "echo", root, nil)
	for _, q := range [][]string{{"version"}, {"api-resources"}, {"auth", "whoami"}} {
		if out, err := run(root, q...); err != nil {
			t.Errorf("kubectl %s: %v\n%s", strings.Join(q, " "), err, out)
		}
	}

	// Outside: refused by the API server, whatever admin's own RBAC says,
	// with its own words.
	for _, q := range []struct {
		args []string
		want string
	}{
		{[]string{"get", "configmaps", "-n", outside},
			`Error from server (Forbidden): configmaps is forbidden: User "` + sa + `" cannot impersonate-on:user-info:list resource "configmaps" in API group "" in the namespace "` + outside + `"`},
		{[]string{"get", "pods", "-A"},
			`Error from server (Forbidden): pods is forbidden: User "` + sa + `" cannot impersonate-on:user-info:list resource "pods" in API group "" at the cluster scope`},
		{[]string{"create", "namespace", unique("ceiling-new")},
			`Error from server (Forbidden): namespaces is forbidden: User "` + sa + `" cannot impersonate-on:user-info:create resource "namespaces" in API group "" at the cluster scope`},
		// The API server asks about a namespace as an object in itself.
		{[]string{"delete", "namespace", outside},
			`Error from server (Forbidden): namespaces "` + outside + `" is forbidden: User "` + sa + `" cannot impersonate-on:user-info:delete resource "namespaces" in API group "" in the namespace "` + outside + `"`},
		{[]string{"get", "secrets", "-n", "kube-system"},
			`Error from server (Forbidden): secrets is forbidden: User "` + sa + `" cannot impersonate-on:user-info:list resource "secrets" in API group "" in the namespace "kube-system"`},
		{[]string{"create", "clusterrolebinding", "mine", "--clusterrole=cluster-admin", "--user=admin"},
			`cannot impersonate-on:user-info:create resource "clusterrolebindings" in API group "rbac.authorization.k8s.io" at the cluster scope`},
	} {
		out, err := run(root, q.args...)
		if err == nil || !strings.Contains(out, q.want) {
			t.Errorf("kubectl %s as admin: %v\n%s\nwant %q", strings.Join(q.args, " "), err, out, q.want)
		}
	}
	// Their own access reviews still answer for their own RBAC: kubectl
	// auth can-i reviews the person, not the ceiling (the hub's inventory
	// filter must ask about the ceiling too).
	if out, err := run(root, "auth", "can-i", "list", "configmaps", "-n", outside); err != nil || strings.TrimSpace(out) != "yes" {
		t.Errorf("kubectl auth can-i as admin outside: %v %q", err, out)
	}

	// access: pat, in platform, may now work in inside (and only there,
	// as the entry without namespaces means allowedNamespaces).
	pat := person("pat", "platform")
	if out, err := run(pat, "create", "configmap", "pats", "-n", inside); err != nil {
		t.Errorf("pat creates a configmap in %s through access: %v\n%s", inside, err, out)
	}
	if out, err := run(pat, "get", "configmaps", "-n", outside); err == nil || !strings.Contains(out, `cannot impersonate-on:user-info:list resource "configmaps"`) {
		t.Errorf("pat in %s: %v\n%s", outside, err, out)
	}
	if out, err := kubectl(t, cluster.AdminKubeconfig, "auth", "can-i", "create", "configmaps", "-n", outside, "--as=pat", "--as-group=platform"); err == nil || strings.TrimSpace(out) != "no" {
		t.Errorf("access bound pat outside allowedNamespaces: %v %s", err, out)
	}
	// The hub's own access reviews as a person (the inventory's filter)
	// pass through the ceiling: the clock pod shows.
	deadline := time.Now().Add(20 * time.Second)
	for {
		status, body := hubGet(t, hubURL+"/api/clusters/"+name+"/resources?kind=pods&namespace="+inside, adminToken)
		if status == 200 && strings.Contains(body, `"name":"clock"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hub's inventory of pods in %s, as admin: %d %s", inside, status, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !auditHas(t, func(e auditEvent) bool {
		return e.User.Username == sa && e.ImpersonatedUser.Username == "admin" &&
			e.RequestURI == "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
	}) {
		t.Errorf("the API server's audit log has no access review from %s as admin", sa)
	}
	// The filter asks the ceiling too, as the account itself: the API
	// server answers that review as the ceiling's Roles grant (decision
	// 029). admin may list namespaces, and the agent sends inside's
	// (inventory.clusterScoped), but no one may list them through Tether.
	for _, q := range []struct {
		args []string
		want string
	}{
		{[]string{"pods", "-n", inside}, "yes"},
		{[]string{"pods", "-n", outside}, "no"},
		{[]string{"namespaces"}, "no"},
	} {
		out, _ := kubectl(t, cluster.AdminKubeconfig, append([]string{"--token=" + string(token), "auth", "can-i", "impersonate-on:user-info:list"}, q.args...)...)
		if got := strings.TrimSpace(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:]); got != q.want {
			t.Errorf("may the account impersonate-on:user-info:list %s? %q, want %s", strings.Join(q.args, " "), out, q.want)
		}
	}
	if out, err := run(root, "get", "namespace", inside, "-o", "name"); err != nil {
		t.Errorf("admin gets namespace %s as the agent's account: %v\n%s", inside, err, out)
	}
	if status, body := hubGet(t, hubURL+"/api/clusters/"+name+"/resources?kind=namespaces", adminToken); status != 200 || strings.TrimSpace(body) != "[]" {
		t.Errorf("the hub's inventory of namespaces, as admin, under the ceiling: %d %s; want []", status, body)
	}
	t.Run("people's kubectl through the hub", func(t *testing.T) {
		// The hub sends strict agents the request id as a domain-prefixed
		// extra: constrained impersonation refuses tether-request-id
		// (decision 027).
		if code, body := hubGet(t, hubURL+"/clusters/"+name+"/api", adminToken); code != 200 {
			t.Fatalf("discovery through the hub: %d %s", code, body)
		}
		kc := kubeconfigFor(t, hubURL, adminToken)
		out, err := kubectl(t, kc, "get", "configmap", "hello", "-n", inside, "-o", "jsonpath={.data.hello}")
		if err != nil || out != "world" {
			t.Fatalf("admin reads a configmap in %s through the hub: %v\n%s", inside, err, out)
		}
		want := `Error from server (Forbidden): configmaps is forbidden: User "` + sa + `" cannot impersonate-on:user-info:list resource "configmaps" in API group "" in the namespace "` + outside + `"`
		if out, err := kubectl(t, kc, "get", "configmaps", "-n", outside); err == nil || !strings.Contains(out, want) {
			t.Errorf("admin in %s through the hub: %v\n%s\nwant %q", outside, err, out, want)
		}
		if out, err := kubectl(t, kc, "exec", "-n", inside, "clock", "--", "echo", "through"); err != nil || out != "through\n" {
			t.Errorf("kubectl exec through the hub: %v %q", err, out)
		}
	})
	noSecrets(t, h, a)
}

// TestStrictModeWithoutConstrainedImpersonation runs an API server with the
// ConstrainedImpersonation feature gate off, as a cluster older than 1.36
// behaves, with the chart's strictMode RBAC: the agent finds out at start
// and says why, and a request as a person is refused.
func TestStrictModeWithoutConstrainedImpersonation(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	old, err := localkube.Start(ctx, localkube.Config{Logger: log, APIServerArgs: []string{"--feature-gates=ConstrainedImpersonation=false"}})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	const release, ns, name = "ceiling-off", "ceiling-off", "gate-off"
	if out, err := kubectl(t, old.AdminKubeconfig, "create", "namespace", ns); err != nil {
		t.Fatal(err, out)
	}
	saDir := applyAgentRBAC(t, old.AdminKubeconfig, release, ns, `
mode: agent
agent: {hubUrl: https://tether.example.com, tokenSecret: agent-token}
strictMode: true
`)
	if err := os.WriteFile(filepath.Join(saDir, "ca.crt"), old.CAPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	_, hubURL := hub(t, nil, name)
	env := agentEnv(t, name, hubURL, agentToken, saDir)
	env["TETHER_STRICT_MODE"] = "true"
	env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"] = old.Host, old.Port
	a := start(t, "agent "+name, env, "agent")
	a.waitFor(t, 10*time.Second, `strictMode: this cluster (Kubernetes 1.36) refuses constrained impersonation, so it would refuse every request through Tether`)
	a.waitFor(t, time.Second, `cannot impersonate resource "users" in API group ""`)
	// It still connects, so the hub can show why: the cluster is
	// Unreachable, with the agent's words, and kubectl gets them in a 503.
	a.waitFor(t, 10*time.Second, `Connected to `+hubURL+` as "`+name+`"`)
	var c struct{ Status, Message, Ceiling string }
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, body := hubGet(t, hubURL+"/api/clusters/"+name, adminToken)
		if json.Unmarshal([]byte(body), &c) == nil && strings.Contains(c.Message, "refuses constrained impersonation") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/api/clusters/%s never said why: %s", name, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if c.Status != "Unreachable" || c.Ceiling != "off" {
		t.Errorf("/api/clusters/%s: %s, ceiling %q; want Unreachable, off", name, c.Status, c.Ceiling)
	}
	if code, body := hubGet(t, hubURL+"/clusters/"+name+"/api", adminToken); code != 503 || !strings.Contains(body, "refuses constrained impersonation") {
		t.Errorf("a request through the hub: %d %s; want 503 saying why", code, body)
	}

	token, err := os.ReadFile(filepath.Join(saDir, "token"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := kubectl(t, old.AdminKubeconfig, "--token="+string(token), "--as=admin", "--as-user-extra="+requestIDExtra+"=1", "get", "configmaps", "-n", ns)
	if err == nil || !strings.Contains(out, `cannot impersonate resource "users"`) {
		t.Errorf("a request as a person where the gate is off: %v\n%s", err, out)
	}
}

// TestStrictModeWithThePlainVerb runs the agent in strict mode as an
// account that also has the plain impersonate verb (the test bed's own, as
// the chart makes it without strictMode): constrained impersonation
// passes, but no ceiling holds, and the agent says so.
func TestStrictModeWithThePlainVerb(t *testing.T) {
	const name = "plain-verb"
	_, hubURL := hub(t, nil, name)
	env := agentEnv(t, name, hubURL, agentToken, cluster.ServiceAccountDir)
	env["TETHER_STRICT_MODE"] = "true"
	a := start(t, "agent "+name, env, "agent")
	a.waitFor(t, 10*time.Second, "strictMode: the agent's ServiceAccount may impersonate anyone for anything (the plain impersonate verb on users), so no ceiling holds")
	a.waitFor(t, 10*time.Second, `Connected to `+hubURL+` as "`+name+`"`)
}

// TestStrictModeRechecks: an agent whose account lacks strictMode's RBAC
// says why, and once the RBAC is there connects again saying the ceiling
// is enforced, so the hub learns it without a restart.
func TestStrictModeRechecks(t *testing.T) {
	ns := unique("ceiling-recheck")
	admin(t, "create", "namespace", ns)
	const release, name = "ceiling-recheck", "recheck"
	values := "mode: agent\nagent: {hubUrl: https://tether.example.com, tokenSecret: agent-token}\nstrictMode: true\nallowedNamespaces: [" + ns + "]\n"
	saDir := applyAgentRBAC(t, cluster.AdminKubeconfig, release, ns, values)
	if err := os.WriteFile(filepath.Join(saDir, "ca.crt"), cluster.CAPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	admin(t, "delete", "clusterrolebinding", release+"-impersonate")

	_, hubURL := hub(t, nil, name)
	env := agentEnv(t, name, hubURL, agentToken, saDir)
	env["TETHER_STRICT_MODE"], env["TETHER_ALLOWED_NAMESPACES"], env["TETHER_TOKEN_REREAD_SECONDS"] = "true", ns, "1"
	a := start(t, "agent "+name, env, "agent")
	a.waitFor(t, 10*time.Second, "strictMode: this cluster (Kubernetes 1.36) refuses constrained impersonation")
	a.waitFor(t, 10*time.Second, `Connected to `+hubURL+` as "`+name+`"`)

	applyAgentRBAC(t, cluster.AdminKubeconfig, release, ns, values)
	a.waitFor(t, 10*time.Second, "strictMode: the API server enforces the ceiling (constrained impersonation)")
	a.waitFor(t, 10*time.Second, "the ceiling is now enforced, and the hub must know")
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(a.out.String(), `Connected to `+hubURL) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the agent didn't connect again:\n%s", a.out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
