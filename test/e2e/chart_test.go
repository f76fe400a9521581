package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/testutil/helmtest"
)

// TestAgentWithTheChartsRBAC runs the agent as the ServiceAccount of the
// Helm chart, with only the RBAC the chart renders, and shows it is
// enough: the hub's status probes (/readyz, /version) and people's kubectl
// go through, as those people, under the cluster's RBAC.
func TestAgentWithTheChartsRBAC(t *testing.T) {
	h := helmtest.New(t)
	const release, ns, name = "chart-e2e", "chart-e2e", "chart"
	sa := "system:serviceaccount:" + ns + ":" + release + "-agent"
	hubProc, hubURL := hub(t, nil, name)

	// What `helm install` would create for the agent's identity: its
	// ServiceAccount and RBAC (the Deployment has no kubelet to run it here;
	// the agent runs as a process below, with that account's token).
	admin(t, "create", "namespace", ns)
	values := "mode: agent\nclusterName: " + name + "\nagent:\n  hubUrl: " + hubURL + "\n  tokenSecret: agent-token\n"
	manifest, err := h.Template(release, ns, values, "--show-only", "templates/serviceaccount.yaml", "--show-only", "templates/agent-rbac.yaml", "--show-only", "templates/agent-inventory-rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := helmtest.Objects(manifest)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, o := range objs {
		kinds = append(kinds, o.Kind()+"/"+o.Name())
	}
	t.Logf("applying %s", strings.Join(kinds, ", "))
	file := filepath.Join(t.TempDir(), "rbac.yaml")
	if err := os.WriteFile(file, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	admin(t, "apply", "-f", file)

	// The pod's service account directory: a token from the TokenRequest
	// API, as the kubelet would mount, and the cluster's CA.
	token, err := kubectl(t, cluster.AdminKubeconfig, "create", "token", release+"-agent", "-n", ns, "--duration=1h")
	if err != nil {
		t.Fatalf("kubectl create token: %v\n%s", err, token)
	}
	token = strings.TrimSpace(token)
	saDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(saDir, "token"), []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(saDir, "ca.crt"), cluster.CAPEM, 0o600); err != nil {
		t.Fatal(err)
	}

	a := agentAs(t, name, hubURL, agentToken, saDir)
	a.waitFor(t, 10*time.Second, `Connected to `+hubURL+` as "`+name+`"`)
	hubProc.waitFor(t, 15*time.Second, `A cluster is Ready cluster="`+name+`" kubernetesVersion=`+cluster.Version)
	if !auditHas(t, requestBy(sa, "/version")) || !auditHas(t, requestBy(sa, "/readyz")) {
		t.Errorf("the API server's audit log has no /version and /readyz from %s", sa)
	}

	chartA, chartB := unique("chart-a"), unique("chart-b")
	setUpPeople(t, chartA, chartB)
	alice := kubeconfigFor(t, hubURL, aliceToken)
	root := kubeconfigFor(t, hubURL, adminToken)
	if out, err := kubectl(t, root, "create", "configmap", "from-the-chart", "-n", chartA, "--from-literal=hello=world"); err != nil {
		t.Fatalf("the admin person creates a configmap through the hub: %v\n%s", err, out)
	}
	if out, err := kubectl(t, alice, "get", "configmap", "from-the-chart", "-n", chartA, "-o", "jsonpath={.data.hello}"); err != nil || out != "world" {
		t.Errorf("alice reads it through the hub: %v\n%s", err, out)
	}
	want := `User "alice" cannot list resource "configmaps" in API group "" in the namespace "` + chartB + `"`
	if out, err := kubectl(t, alice, "get", "configmaps", "-n", chartB); err == nil || !strings.Contains(out, want) {
		t.Errorf("alice in %s: %v\n%s\nwant %q", chartB, err, out, want)
	}
	// The agent's account itself may not read Secrets; a person the
	// cluster lets may, through it.
	if out, err := kubectl(t, alice, "get", "secrets", "-n", chartA); err == nil || !strings.Contains(out, `User "alice" cannot list resource "secrets"`) {
		t.Errorf("alice lists secrets: %v\n%s", err, out)
	}
	if out, err := kubectl(t, root, "get", "secrets", "-n", "kube-system"); err != nil {
		t.Errorf("the admin person lists secrets: %v\n%s", err, out)
	}

	// The inventory streams with the chart's read-only RBAC: the hub knows
	// the namespaces and the pods of the cluster.
	deadline := time.Now().Add(20 * time.Second)
	for {
		status, body := hubGet(t, hubURL+"/api/clusters/"+name+"/resources?kind=namespaces", adminToken)
		if status == 200 && strings.Contains(body, `"name":"`+chartB+`"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hub's inventory of %q has no namespace %s: %d %s", name, chartB, status, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if status, body := hubGet(t, hubURL+"/api/clusters/"+name+"/resources?kind=pods", adminToken); status != 200 {
		t.Errorf("the hub's inventory of pods: %d %s", status, body)
	}

	// Every one of those went to the API server as the chart's account,
	// impersonating the person, with the hub's request id as the one extra
	// the chart's role allows.
	for _, person := range []string{"alice", "admin"} {
		if !auditHas(t, func(e auditEvent) bool {
			return e.User.Username == sa && e.ImpersonatedUser.Username == person &&
				len(e.ImpersonatedUser.Extra["tether-request-id"]) == 1
		}) {
			t.Errorf("the API server's audit log has no request from %s impersonating %s with a tether-request-id", sa, person)
		}
	}
	for _, p := range []*proc{hubProc, a} {
		if strings.Contains(p.out.String(), token) || strings.Contains(p.out.String(), agentToken) {
			t.Errorf("%s printed a token", p.name)
		}
	}
}

// hubGet GETs url from the hub as the person with token.
func hubGet(t *testing.T, url, token string) (int, string) {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(hubCA.CertPEM)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer client.CloseIdleConnections()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
