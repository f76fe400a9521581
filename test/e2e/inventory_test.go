package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/localkube"
)

// apiGet GETs path from the hub as token and decodes the JSON answer into
// out, returning the status.
func apiGet(t *testing.T, hubURL, token, path string, out any) int {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(hubCA.CertPEM)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 30 * time.Second}
	req, _ := http.NewRequest("GET", hubURL+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if out != nil && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(body, out); err != nil {
			t.Fatalf("GET %s: %v\n%s", path, err, body)
		}
	}
	return resp.StatusCode
}

type item struct {
	Cluster, Kind, Namespace, Name string
	Ready                          bool
	Sync, Health                   string
}

// itemNames GETs a resources query and lists "namespace/name" of each item.
func itemNames(t *testing.T, hubURL, token, path string) []string {
	t.Helper()
	var items []item
	if code := apiGet(t, hubURL, token, path, &items); code != 200 {
		t.Fatalf("GET %s: %d", path, code)
	}
	var out []string
	for _, it := range items {
		out = append(out, it.Namespace+"/"+it.Name)
	}
	return out
}

func within(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func applyYAML(t *testing.T, manifest string) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "m.yaml")
	if err := os.WriteFile(f, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := kubectl(t, cluster.AdminKubeconfig, "apply", "--server-side", "-f", f); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
}

// inventoryAgent starts an agent for name with the extra settings.
func inventoryAgent(t *testing.T, name, hubURL string, extra map[string]string) *proc {
	t.Helper()
	env := agentEnv(t, name, hubURL, agentToken, cluster.ServiceAccountDir)
	for k, v := range extra {
		env[k] = v
	}
	a := start(t, "agent "+name, env, "agent")
	a.waitFor(t, 15*time.Second, `Connected to `+hubURL+` as "`+name+`"`)
	return a
}

func TestInventoryThroughTheHub(t *testing.T) {
	ctx := t.Context()
	if err := cluster.GrantInventory(ctx, localkube.Namespace, localkube.ServiceAccount); err != nil {
		t.Fatal(err)
	}
	applyYAML(t, argoAndIstioCRDs)
	admin(t, "wait", "--for=condition=Established", "crd/applications.argoproj.io", "crd/gateways.networking.istio.io")
	// Namespaces can't be deleted here (no namespace controller finalizes
	// them), so the pods' namespaces are new in each run: -count above 1
	// works.
	teamA, teamB := unique("inv-team-a"), unique("inv-team-b")
	for _, ns := range []string{teamA, teamB, "inv-argocd", "inv-istio"} {
		admin(t, "create", "namespace", ns)
	}
	applyYAML(t, argoAndIstioObjects)
	// alice (group dev) may list pods in teamA only.
	admin(t, "create", "role", "pod-reader", "-n", teamA, "--verb=get,list,watch", "--resource=pods")
	admin(t, "create", "rolebinding", "dev-reads-pods", "-n", teamA, "--role=pod-reader", "--group=dev")
	admin(t, "create", "clusterrolebinding", "tether-admins", "--clusterrole=cluster-admin", "--group=tether:admins")
	for _, ns := range []string{teamA, teamB} {
		mustCreatePod(t, ns, "waiting")
	}

	_, hubURL := hub(t, nil, "inv-tb", "inv-plain")
	a := inventoryAgent(t, "inv-tb", hubURL, map[string]string{"TETHER_ISTIO_GATEWAY_TIE_BREAKER": "inv-istio/wild"})
	inventoryAgent(t, "inv-plain", hubURL, nil)

	// The summary on /api/clusters.
	var c struct {
		Summary struct{ NodesReady, NodesTotal, PodsNotReady, AppsOutOfSync *int }
	}
	for _, name := range []string{"inv-plain", "inv-tb"} {
		within(t, 15*time.Second, "the summary of "+name, func() bool {
			c.Summary.NodesTotal, c.Summary.AppsOutOfSync = nil, nil
			apiGet(t, hubURL, adminToken, "/api/clusters/"+name, &c)
			return c.Summary.NodesTotal != nil && c.Summary.AppsOutOfSync != nil
		})
	}
	if *c.Summary.NodesTotal != 1 || *c.Summary.NodesReady != 1 || *c.Summary.AppsOutOfSync != 2 || *c.Summary.PodsNotReady < 2 {
		t.Errorf("summary: nodes %d/%d, pods not ready %d, apps out of sync %d; want 1/1, at least 2, 2",
			*c.Summary.NodesReady, *c.Summary.NodesTotal, *c.Summary.PodsNotReady, *c.Summary.AppsOutOfSync)
	}

	t.Run("Argo CD applications show sync and health", func(t *testing.T) {
		var items []item
		apiGet(t, hubURL, adminToken, "/api/clusters/inv-tb/resources?kind=applications&namespace=inv-argocd", &items)
		got := map[string]string{}
		for _, it := range items {
			got[it.Name] = it.Sync + "/" + it.Health
		}
		want := map[string]string{"shop": "Synced/Healthy", "billing": "OutOfSync/Healthy", "search": "Synced/Degraded"}
		if len(got) != len(want) {
			t.Fatalf("applications: %v, want %v", got, want)
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("application %s: %q, want %q", k, got[k], v)
			}
		}
		if n := itemNames(t, hubURL, adminToken, "/api/clusters/inv-tb/resources?kind=applications&ready=false"); !slices.Equal(n, []string{"inv-argocd/billing", "inv-argocd/search"}) {
			t.Errorf("applications not ready: %v", n)
		}
	})

	t.Run("Istio gateways", func(t *testing.T) {
		var g struct {
			Gateway    string
			Candidates []string
			Error      string
		}
		if code := apiGet(t, hubURL, adminToken, "/api/clusters/inv-plain/gateways?host=shop.domain2.com", &g); code != 200 || g.Gateway != "inv-istio/shop" {
			t.Errorf("one gateway: %d %+v", code, g)
		}
		g.Gateway = ""
		if code := apiGet(t, hubURL, adminToken, "/api/clusters/inv-tb/gateways?host=example.domain1.com", &g); code != 200 || g.Gateway != "inv-istio/wild" {
			t.Errorf("two gateways and a tie-breaker: %d %+v", code, g)
		}
		g.Gateway = ""
		code := apiGet(t, hubURL, adminToken, "/api/clusters/inv-plain/gateways?host=example.domain1.com", &g)
		if code != http.StatusConflict || g.Gateway != "" || !strings.Contains(g.Error, "inv-istio/exact") || !strings.Contains(g.Error, "inv-istio/wild") {
			t.Errorf("two gateways, no tie-breaker: %d %+v; want 409 naming both", code, g)
		}
		if code := apiGet(t, hubURL, adminToken, "/api/clusters/inv-plain/gateways?host=nowhere.example", nil); code != http.StatusNotFound {
			t.Errorf("no gateway: %d", code)
		}
	})

	t.Run("people see only what they may list", func(t *testing.T) {
		for _, path := range []string{"/api/resources?kind=pods&ready=false", "/api/clusters/inv-tb/resources?kind=pods"} {
			got := itemNames(t, hubURL, aliceToken, path)
			if !slices.Contains(got, teamA+"/waiting") {
				t.Errorf("alice, %s: %v; want %s's pod", path, got, teamA)
			}
			// Other tests may let dev list pods elsewhere; never here.
			for _, n := range got {
				if strings.HasPrefix(n, teamB+"/") {
					t.Errorf("alice, %s: sees %s", path, n)
				}
			}
			all := itemNames(t, hubURL, adminToken, path)
			if !slices.Contains(all, teamA+"/waiting") || !slices.Contains(all, teamB+"/waiting") {
				t.Errorf("admin, %s: %v; want both pods", path, all)
			}
		}
		// Fleet-wide, items name their cluster; alice's come from both.
		var items []item
		apiGet(t, hubURL, aliceToken, "/api/resources?kind=pods&namespace="+teamA, &items)
		clusters := map[string]bool{}
		for _, it := range items {
			clusters[it.Cluster] = true
		}
		if !clusters["inv-tb"] || !clusters["inv-plain"] {
			t.Errorf("fleet-wide clusters: %v", clusters)
		}
		// Nothing of Argo CD for alice: she may not list applications.
		if n := itemNames(t, hubURL, aliceToken, "/api/clusters/inv-tb/resources?kind=applications"); len(n) != 0 {
			t.Errorf("alice sees applications %v", n)
		}
		if code := apiGet(t, hubURL, aliceToken, "/api/clusters/inv-tb/resources?kind=secrets", nil); code != http.StatusBadRequest {
			t.Errorf("kind=secrets: %d, want 400", code)
		}
	})

	t.Run("changes arrive within 2 s", func(t *testing.T) {
		path := "/api/clusters/inv-tb/resources?kind=pods&namespace=" + teamA
		mustCreatePod(t, teamA, "fresh")
		start := time.Now()
		within(t, 2*time.Second, "a created pod", func() bool { return slices.Contains(itemNames(t, hubURL, adminToken, path), teamA+"/fresh") })
		t.Logf("a created pod reached the hub's API in %s", time.Since(start).Round(time.Millisecond))
		admin(t, "label", "pod", "fresh", "-n", teamA, "stage=two")
		within(t, 2*time.Second, "a changed label", func() bool {
			return slices.Contains(itemNames(t, hubURL, adminToken, path+"&labelSelector=stage%3Dtwo"), teamA+"/fresh")
		})
		admin(t, "delete", "pod", "fresh", "-n", teamA, "--wait=false")
		start = time.Now()
		within(t, 2*time.Second, "a deleted pod", func() bool { return !slices.Contains(itemNames(t, hubURL, adminToken, path), teamA+"/fresh") })
		t.Logf("a deleted pod left the hub's API in %s", time.Since(start).Round(time.Millisecond))
	})

	t.Run("no ghosts after the agent reconnects", func(t *testing.T) {
		path := "/api/clusters/inv-tb/resources?kind=pods&namespace=" + teamB
		mustCreatePod(t, teamB, "doomed")
		within(t, 2*time.Second, "pod doomed", func() bool { return slices.Contains(itemNames(t, hubURL, adminToken, path), teamB+"/doomed") })
		a.signal(syscall.SIGKILL)
		a.exit(t, 10*time.Second)
		admin(t, "delete", "pod", "doomed", "-n", teamB, "--wait=false")
		mustCreatePod(t, teamB, "born-while-away")
		inventoryAgent(t, "inv-tb", hubURL, map[string]string{"TETHER_ISTIO_GATEWAY_TIE_BREAKER": "inv-istio/wild"})
		want := podsIn(t, teamB)
		within(t, 10*time.Second, "the hub to equal the API server", func() bool {
			return slices.Equal(itemNames(t, hubURL, adminToken, path), want)
		})
		if slices.Contains(want, teamB+"/doomed") || !slices.Contains(want, teamB+"/born-while-away") {
			t.Fatalf("the API server has %v", want)
		}
	})
}

func mustCreatePod(t *testing.T, ns, name string) {
	t.Helper()
	pod := map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": ns},
		// No node: it stays Pending, which counts as not ready.
		"spec": map[string]any{"containers": []any{map[string]any{"name": "main", "image": "registry.example/app:1"}}},
	}
	if err := cluster.Do(t.Context(), "POST", "/api/v1/namespaces/"+ns+"/pods", pod, nil); err != nil {
		t.Fatal(err)
	}
}

func podsIn(t *testing.T, ns string) []string {
	t.Helper()
	var list struct {
		Items []struct{ Metadata struct{ Name string } }
	}
	if err := cluster.Do(t.Context(), "GET", "/api/v1/namespaces/"+ns+"/pods", nil, &list); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range list.Items {
		out = append(out, ns+"/"+p.Metadata.Name)
	}
	sort.Strings(out)
	return out
}

// The CRDs of Argo CD's Application and Istio's Gateway, cut to what the
// inventory reads: their schemas keep unknown fields, as the real ones
// accept these objects.
const argoAndIstioCRDs = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: applications.argoproj.io}
spec:
  group: argoproj.io
  names: {kind: Application, listKind: ApplicationList, plural: applications, singular: application, shortNames: [app, apps]}
  scope: Namespaced
  versions:
  - name: v1alpha1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gateways.networking.istio.io}
spec:
  group: networking.istio.io
  names: {kind: Gateway, listKind: GatewayList, plural: gateways, singular: gateway, shortNames: [gw]}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
  - name: v1beta1
    served: true
    storage: false
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`

const argoAndIstioObjects = `
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: shop, namespace: inv-argocd}
spec: {project: default, destination: {server: "https://kubernetes.default.svc", namespace: shop}}
status: {sync: {status: Synced}, health: {status: Healthy}}
---
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: billing, namespace: inv-argocd}
spec: {project: default}
status: {sync: {status: OutOfSync}, health: {status: Healthy}}
---
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: search, namespace: inv-argocd}
spec: {project: default}
status: {sync: {status: Synced}, health: {status: Degraded}}
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: exact, namespace: inv-istio}
spec:
  selector: {istio: ingressgateway}
  servers: [{port: {number: 443, name: https, protocol: HTTPS}, hosts: [example.domain1.com]}]
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: wild, namespace: inv-istio}
spec:
  selector: {istio: ingressgateway}
  servers: [{port: {number: 443, name: https, protocol: HTTPS}, hosts: ["*.domain1.com"]}]
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: shop, namespace: inv-istio}
spec:
  selector: {istio: ingressgateway}
  servers: [{port: {number: 80, name: http, protocol: HTTP}, hosts: ["inv-istio/shop.domain2.com"]}]
`
