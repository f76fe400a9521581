package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/testutil/helmtest"
)

// TestHelmThroughTheHub: helm installs, upgrades, rolls back and uninstalls
// a chart of two ConfigMaps through the hub, with a kubeconfig the hub
// handed out; helm keeps its releases in Secrets, so this is also helm's
// storage going through the hub.
func TestHelmThroughTheHub(t *testing.T) {
	ns := unique("helm")
	admin(t, "create", "namespace", ns)
	setUpPeople(t, "team-a", "team-b") // the tether:admins binding
	_, hubURL := hub(t, nil, "e2e")
	a := agent(t, "e2e", hubURL, agentToken)
	a.waitFor(t, 10*time.Second, `Connected to `+hubURL+` as "e2e"`)
	h := helmtest.New(t)
	h.Kubeconfig = kubeconfigFor(t, hubURL, adminToken)
	chart, err := filepath.Abs(filepath.Join("testdata", "greeting"))
	if err != nil {
		t.Fatal(err)
	}
	helm := func(args ...string) string {
		t.Helper()
		out, err := h.Run(append(args, "-n", ns)...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	// data reads a ConfigMap's key straight from the API server.
	data := func(name, key string) string {
		t.Helper()
		out, err := kubectl(t, cluster.AdminKubeconfig, "get", "configmap", name, "-n", ns, "-o", "jsonpath={.data."+key+"}")
		if err != nil {
			t.Fatalf("get %s: %v\n%s", name, err, out)
		}
		return out
	}

	helm("install", "hi", chart, "--wait", "--timeout=60s")
	if got := data("hi-greeting", "greeting"); got != "hello" {
		t.Errorf("after install: greeting %q, want hello", got)
	}
	helm("upgrade", "hi", chart, "--set", "greeting=bonjour", "--wait", "--timeout=60s")
	if got, rev := data("hi-greeting", "greeting"), data("hi-revision", "revision"); got != "bonjour" || rev != "2" {
		t.Errorf("after upgrade: greeting %q revision %q, want bonjour 2", got, rev)
	}
	helm("rollback", "hi", "1", "--wait", "--timeout=60s")
	if got, rev := data("hi-greeting", "greeting"), data("hi-revision", "revision"); got != "hello" || rev != "1" {
		t.Errorf("after rollback: greeting %q revision %q, want hello 1", got, rev)
	}
	if out := helm("history", "hi", "-o", "json"); strings.Count(out, `"revision":`) != 3 {
		t.Errorf("history: want 3 revisions\n%s", out)
	}
	helm("uninstall", "hi", "--wait", "--timeout=60s")
	out, err := kubectl(t, cluster.AdminKubeconfig, "get", "configmaps,secrets", "-n", ns, "-o", "name")
	if err != nil || strings.Contains(out, "hi-") || strings.Contains(out, "sh.helm.release") {
		t.Errorf("after uninstall: %v\n%s", err, out)
	}
}

// TestKubectlClientsThroughTheHub runs kubectl 1.36 and the machine's own,
// older, kubectl through a hub that prefixes whom it impersonates: get,
// apply (client-side and server-side), the ephemeral-container call of
// `kubectl debug`, and `kubectl auth whoami` naming the person as the hub
// maps them. (`kubectl cp` is in TestStreamingThroughTheHub.)
func TestKubectlClientsThroughTheHub(t *testing.T) {
	ns := unique("clients")
	admin(t, "create", "namespace", ns)
	admin(t, "create", "role", "worker", "-n", ns, "--verb=get,list,watch,create,update,patch,delete", "--resource=configmaps,pods,pods/ephemeralcontainers")
	admin(t, "create", "rolebinding", "dev-works", "-n", ns, "--role=worker", "--group=tether:dev")
	_, hubURL := hub(t, map[string]string{"TETHER_IMPERSONATE_USER_PREFIX": "tether:", "TETHER_IMPERSONATE_GROUP_PREFIX": "tether:"}, "e2e")
	a := agent(t, "e2e", hubURL, agentToken)
	a.waitFor(t, 10*time.Second, `Connected to `+hubURL+` as "e2e"`)
	alice := kubeconfigFor(t, hubURL, aliceToken)
	createPod(t, ns, "target", map[string]any{"command": []string{"sh", "-c", "while true; do sleep 1; done"}}, "Always")

	type client struct {
		name string
		cmd  func(ctx context.Context, args ...string) *exec.Cmd
	}
	clients := []client{{"kubectl-1-36", func(ctx context.Context, args ...string) *exec.Cmd {
		return cluster.KubectlCommand(ctx, alice, args...)
	}}}
	if bin, err := exec.LookPath("kubectl"); err != nil || bin == cluster.Kubectl {
		t.Logf("no other kubectl on PATH (%v): only kubectl 1.36 runs", err)
	} else {
		cache := t.TempDir()
		clients = append(clients, client{"kubectl-machine", func(ctx context.Context, args ...string) *exec.Cmd {
			cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig=" + alice, "--cache-dir=" + cache}, args...)...)
			cmd.Env = append(os.Environ(), "KUBERC=off")
			return cmd
		}})
	}
	for _, c := range clients {
		t.Run(c.name, func(t *testing.T) {
			run := func(stdin string, args ...string) string {
				t.Helper()
				ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
				defer cancel()
				cmd := c.cmd(ctx, args...)
				cmd.Stdin = strings.NewReader(stdin)
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
				}
				return string(out)
			}
			if v := run("", "version", "--client", "-o", "json"); !strings.Contains(v, `"gitVersion"`) {
				t.Fatalf("kubectl version: %s", v)
			} else {
				t.Logf("%s is %s", c.name, between(v, `"gitVersion": "`, `"`))
			}
			manifest := func(name, value string) string {
				return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n  namespace: %s\ndata:\n  k: %s\n", name, ns, value)
			}
			client, server := c.name+"-client", c.name+"-server"
			run(manifest(client, "one"), "apply", "-f", "-")
			run(manifest(client, "two"), "apply", "-f", "-")
			run(manifest(server, "one"), "apply", "--server-side", "--field-manager=e2e", "-f", "-")
			run(manifest(server, "two"), "apply", "--server-side", "--field-manager=e2e", "-f", "-")
			for _, name := range []string{client, server} {
				if got := run("", "get", "configmap", name, "-n", ns, "-o", "jsonpath={.data.k}"); got != "two" {
					t.Errorf("%s after two applies: k=%q, want two", name, got)
				}
			}
			managers := run("", "get", "configmap", server, "-n", ns, "--show-managed-fields", "-o", "jsonpath={.metadata.managedFields[*].manager}/{.metadata.managedFields[*].operation}")
			if managers != "e2e/Apply" {
				t.Errorf("server-side apply's managed fields: %q, want e2e/Apply", managers)
			}

			// kubectl debug's API call: a patch of pods/ephemeralcontainers.
			// Whether the test node starts the container doesn't matter.
			debugger := "debug-" + strings.TrimPrefix(c.name, "kubectl-")
			run("", "debug", "-n", ns, "target", "--image=busybox", "-c", debugger, "--", "true")
			out, err := kubectl(t, cluster.AdminKubeconfig, "get", "pod", "target", "-n", ns, "-o", "jsonpath={.spec.ephemeralContainers[*].name}")
			if err != nil || !slices.Contains(strings.Fields(out), debugger) {
				t.Errorf("ephemeral containers after kubectl debug: %q (%v), want %s among them", out, err, debugger)
			}

			if got := run("", "auth", "can-i", "patch", "pods/ephemeralcontainers", "-n", ns); strings.TrimSpace(got) != "yes" {
				t.Errorf("auth can-i patch pods/ephemeralcontainers: %q, want yes", got)
			}
			if out, err := c.cmd(t.Context(), "auth", "can-i", "list", "secrets", "-n", ns).CombinedOutput(); err == nil || strings.TrimSpace(string(out)) != "no" {
				t.Errorf("auth can-i list secrets: %q (%v), want no", out, err)
			}

			var who struct {
				Status struct {
					UserInfo struct {
						Username string
						Groups   []string
					}
				}
			}
			if err := json.Unmarshal([]byte(run("", "auth", "whoami", "-o", "json")), &who); err != nil {
				t.Fatal(err)
			}
			u := who.Status.UserInfo
			if want := []string{"tether:dev", "system:authenticated"}; u.Username != "tether:alice" || !slices.Equal(u.Groups, want) {
				t.Errorf("auth whoami: %q in %q, want tether:alice in %q", u.Username, u.Groups, want)
			}
		})
	}
}
