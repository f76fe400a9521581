package e2e

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/localkube"
	"github.com/tetherhq/tether/internal/login"
	"github.com/tetherhq/tether/internal/testutil/syncbuf"
)

// People the hub in these tests knows: alice in group dev, admin in a group
// bound to cluster-admin.
const (
	aliceToken = "alice-e2e-token-0123456789abcdef0123456789"
	adminToken = "admin-e2e-token-0123456789abcdef0123456789"
	testUsers  = `
- name: alice
  token: ` + aliceToken + `
  groups: [dev]
- name: admin
  token: ` + adminToken + `
  groups: ["tether:admins"]
`
)

// contextOf is the name of cluster's context in the hub at hubURL's
// kubeconfigs: the hub's host first, as `tether login` names them.
func contextOf(hubURL, cluster string) string { return login.Prefix(hubURL) + "/" + cluster }

// kubeconfigFor fetches GET /api/kubeconfig as token and writes it to a file.
func kubeconfigFor(t *testing.T, hubURL, token string) string {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(hubCA.CertPEM)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	req, _ := http.NewRequest("GET", hubURL+"/api/kubeconfig", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("GET /api/kubeconfig: %d, Cache-Control %q: %s", resp.StatusCode, resp.Header.Get("Cache-Control"), body)
	}
	f := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(f, body, 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// kubectl runs the tests' kubectl (v1.36.3) with kubeconfig.
func kubectl(t *testing.T, kubeconfig string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := cluster.KubectlCommand(ctx, kubeconfig, args...).CombinedOutput()
	return string(out), err
}

// admin runs kubectl straight at the API server as its admin, to set up.
func admin(t *testing.T, args ...string) {
	t.Helper()
	out, err := kubectl(t, cluster.AdminKubeconfig, args...)
	if err != nil && !strings.Contains(out, "AlreadyExists") && !strings.Contains(out, "already exists") {
		t.Fatalf("kubectl %v: %v\n%s", args, err, out)
	}
}

// unique returns name with a random suffix, for namespaces: the tests
// share one API server, and namespaces can't be deleted there (no
// namespace controller finalizes them), so with -count above 1 each run
// needs its own.
func unique(name string) string {
	return name + "-" + strings.ToLower(rand.Text()[:6])
}

// setUpPeople gives group dev read access to configmaps in namespace
// readable, none in hidden, and group tether:admins cluster-admin.
func setUpPeople(t *testing.T, readable, hidden string) {
	t.Helper()
	admin(t, "create", "namespace", readable)
	admin(t, "create", "namespace", hidden)
	admin(t, "create", "role", "reader", "-n", readable, "--verb=get,list,watch", "--resource=configmaps")
	admin(t, "create", "rolebinding", "dev-reads", "-n", readable, "--role=reader", "--group=dev")
	admin(t, "create", "clusterrolebinding", "tether-admins", "--clusterrole=cluster-admin", "--group=tether:admins")
}

func TestKubectlThroughTheHub(t *testing.T) {
	setUpPeople(t, "team-a", "team-b")
	_, hubURL := hub(t, nil, "e2e")
	a := agent(t, "e2e", hubURL, agentToken)
	a.waitFor(t, 10*time.Second, `Connected to `+hubURL+` as "e2e"`)
	alice := kubeconfigFor(t, hubURL, aliceToken)
	root := kubeconfigFor(t, hubURL, adminToken)

	// An admin applies, reads and deletes through the hub.
	manifest := filepath.Join(t.TempDir(), "cm.yaml")
	os.WriteFile(manifest, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: greeting\n  namespace: team-a\ndata:\n  hello: world\n"), 0o600)
	if out, err := kubectl(t, root, "apply", "-f", manifest); err != nil || !strings.Contains(out, "configmap/greeting created") {
		t.Fatalf("apply: %v\n%s", err, out)
	}

	// Alice reads where her group may, through both kubectls.
	if out, err := kubectl(t, alice, "get", "configmap", "greeting", "-n", "team-a", "-o", "jsonpath={.data.hello}"); err != nil || out != "world" {
		t.Errorf("alice get in team-a: %v\n%s", err, out)
	}
	if out, err := exec.Command("kubectl", "--kubeconfig", alice, "get", "configmaps", "-n", "team-a").CombinedOutput(); err != nil || !strings.Contains(string(out), "greeting") {
		t.Errorf("the machine's kubectl: %v\n%s", err, out)
	}
	// kubectl 1.34 and later send --raw paths below the kubeconfig's
	// /clusters/<name>; older ones, like the machine's, from the hub's root,
	// where the hub answers what to send instead.
	if out, err := kubectl(t, alice, "get", "--raw", "/version"); err != nil || !strings.Contains(out, `"gitVersion"`) {
		t.Errorf("get --raw /version: %v\n%s", err, out)
	}
	if out, _ := exec.Command("kubectl", "--kubeconfig", alice, "get", "--raw", "/version").CombinedOutput(); !strings.Contains(string(out), `"gitVersion"`) &&
		!strings.Contains(string(out), "use kubectl 1.34 or later, or give the whole path, like --raw /clusters/<name>/version") {
		t.Errorf("the machine's kubectl, get --raw /version: neither the version nor what to do instead\n%s", out)
	}
	// ... and is refused elsewhere, by the API server, by her name.
	want := `User "alice" cannot list resource "configmaps" in API group "" in the namespace "team-b"`
	if out, err := kubectl(t, alice, "get", "configmaps", "-n", "team-b"); err == nil || !strings.Contains(out, want) {
		t.Errorf("alice in team-b: %v\n%s\nwant %q", err, out, want)
	}
	// Asking kubectl to impersonate changes nothing: the hub drops it, and
	// says so in a warning kubectl prints.
	if out, err := kubectl(t, alice, "get", "configmaps", "-n", "team-b", "--as=admin", "--as-group=system:masters"); err == nil || !strings.Contains(out, want) ||
		!strings.Contains(out, "Warning: Tether removed the Impersonate-* headers you sent: requests go to the cluster as you") {
		t.Errorf("alice --as=admin --as-group=system:masters: %v\n%s", err, out)
	}

	// A watch streams events as they happen.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watch := cluster.KubectlCommand(ctx, alice, "get", "configmaps", "-n", "team-a", "-w", "--output-watch-events", "-o", "jsonpath={.type} {.object.metadata.name}{\"\\n\"}")
	var watched syncbuf.Buffer
	watch.Stdout, watch.Stderr = &watched, &watched
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	defer watch.Wait()
	waitOutput(t, &watched, "ADDED greeting\n")
	admin(t, "create", "configmap", "late", "-n", "team-a", "--from-literal=k=v")
	waitOutput(t, &watched, "ADDED late\n")
	if out, err := kubectl(t, root, "delete", "configmap", "greeting", "-n", "team-a"); err != nil {
		t.Fatalf("delete: %v\n%s", err, out)
	}
	waitOutput(t, &watched, "DELETED greeting\n")
	cancel()

	// A tampered kubeconfig token is refused.
	b, _ := os.ReadFile(alice)
	tampered := strings.Replace(string(b), "token: ", "token: x", 1)
	os.WriteFile(alice, []byte(tampered), 0o600)
	if out, err := kubectl(t, alice, "get", "configmaps", "-n", "team-a"); err == nil || !strings.Contains(out, "You must be logged in to the server") {
		t.Errorf("a tampered token: %v\n%s", err, out)
	}

	// The API server's own audit log names alice and the hub's request id.
	if !auditHas(t, func(e auditEvent) bool {
		return e.User.Username == cluster.ServiceAccountName && e.ImpersonatedUser.Username == "alice" &&
			len(e.ImpersonatedUser.Extra["tether-request-id"]) == 1
	}) {
		t.Error("the API server's audit log has no request impersonating alice with a tether-request-id")
	}
}

func waitOutput(t *testing.T, b *syncbuf.Buffer, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(b.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q within 10 s; output:\n%s", want, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestKubectlToAClusterTheHubReaches: a cluster in TETHER_FLEET_CLUSTERS,
// with no agent in it, works with kubectl through the hub as an agent's
// does: as the person, with the cluster's RBAC, and listed as Ready.
func TestKubectlToAClusterTheHubReaches(t *testing.T) {
	setUpPeople(t, "direct-a", "direct-b")
	admin(t, "create", "configmap", "greeting", "-n", "direct-a", "--from-literal=hello=direct")
	// The token may read the inventory's kinds, as the chart lets an agent.
	if err := cluster.GrantInventory(context.Background(), localkube.Namespace, localkube.ServiceAccount); err != nil {
		t.Fatal(err)
	}
	clusters := "- name: direct\n  server: " + cluster.URL + "\n  caFile: " + cluster.CAFile +
		"\n  tokenFile: " + filepath.Join(cluster.ServiceAccountDir, "token") + "\n  labels: {reach: direct}\n"
	h, hubURL := hub(t, map[string]string{"TETHER_FLEET_CLUSTERS": clusters})
	h.waitFor(t, 10*time.Second, `The agent of "direct" connected`)
	alice := kubeconfigFor(t, hubURL, aliceToken)

	if out, err := kubectl(t, alice, "--context", contextOf(hubURL, "direct"), "get", "configmap", "greeting", "-n", "direct-a", "-o", "jsonpath={.data.hello}"); err != nil || out != "direct" {
		t.Errorf("alice get in direct-a: %v\n%s", err, out)
	}
	want := `User "alice" cannot list resource "configmaps" in API group "" in the namespace "direct-b"`
	if out, err := kubectl(t, alice, "--context", contextOf(hubURL, "direct"), "get", "configmaps", "-n", "direct-b"); err == nil || !strings.Contains(out, want) {
		t.Errorf("alice in direct-b: %v\n%s\nwant %q", err, out, want)
	}
	// Listed as Ready, with the API server's version and its inventory's
	// summary.
	within(t, 10*time.Second, "direct listed Ready with its version and summary", func() bool {
		_, body := hubGet(t, hubURL+"/api/clusters/direct", aliceToken)
		return strings.Contains(body, `"status":"Ready"`) && strings.Contains(body, `"kubernetesVersion":"v1.36.3"`) && strings.Contains(body, `"nodesTotal":1`)
	})
}
