package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/localkube"
)

// TestProxyOffAgent: an agent with TETHER_PROXY=false (SPEC section 9)
// still carries the hub's probes and access reviews to the real API server:
// the cluster is Ready, /api/clusters says the proxy is off, and a person
// sees only the pods their RBAC lets them list. kubectl through the hub
// gets the hub's 503 saying the cluster takes no requests through Tether,
// and the API server's audit log has no request of hers for those pods.
func TestProxyOffAgent(t *testing.T) {
	if err := cluster.GrantInventory(t.Context(), localkube.Namespace, localkube.ServiceAccount); err != nil {
		t.Fatal(err)
	}
	readable, hidden := unique("pxoff-a"), unique("pxoff-b")
	setUpPeople(t, readable, hidden)
	admin(t, "create", "role", "pod-reader", "-n", readable, "--verb=get,list,watch", "--resource=pods")
	admin(t, "create", "rolebinding", "dev-reads-pods", "-n", readable, "--role=pod-reader", "--group=dev")
	mustCreatePod(t, readable, "web")
	mustCreatePod(t, hidden, "db")

	_, hubURL := hub(t, nil, "px-off")
	a := inventoryAgent(t, "px-off", hubURL, map[string]string{"TETHER_PROXY": "false"})
	a.waitFor(t, 5*time.Second, "The proxy is off (TETHER_PROXY=false)")

	var c struct {
		Status string
		Halves *struct{ Proxy, Inventory bool }
	}
	within(t, 15*time.Second, "px-off Ready", func() bool {
		return apiGet(t, hubURL, aliceToken, "/api/clusters/px-off", &c) == 200 && c.Status == "Ready"
	})
	if c.Halves == nil || c.Halves.Proxy || !c.Halves.Inventory {
		t.Errorf("/api/clusters/px-off halves = %+v, want proxy false, inventory true", c.Halves)
	}

	var names []string
	within(t, 15*time.Second, "alice's pods of px-off", func() bool {
		var items []item
		names = nil
		if apiGet(t, hubURL, aliceToken, "/api/clusters/px-off/resources?kind=pods", &items) != 200 {
			return false // no snapshot yet
		}
		for _, it := range items {
			names = append(names, it.Namespace+"/"+it.Name)
		}
		return slices.Contains(names, readable+"/web")
	})
	if slices.Contains(names, hidden+"/db") {
		t.Errorf("alice sees %v, with %s/db, which she may not list", names, hidden)
	}

	kc := kubeconfigFor(t, hubURL, aliceToken)
	// --raw: kubectl's discovery would put its own words over the hub's.
	out, err := kubectl(t, kc, "--context", contextOf(hubURL, "px-off"), "get", "--raw", "/api/v1/namespaces/"+readable+"/pods")
	if err == nil || !strings.Contains(out, `Cluster "px-off" takes no requests through Tether`) {
		t.Errorf("kubectl through a proxy-off cluster: %v\n%s\nwant the hub's 503 saying it takes no requests", err, out)
	}
	if auditHas(t, func(e auditEvent) bool {
		return e.ImpersonatedUser.Username == "alice" && strings.HasPrefix(e.RequestURI, "/api/v1/namespaces/"+readable+"/pods")
	}) {
		t.Errorf("the API server's audit log has alice's request through the proxy-off agent")
	}
}

// TestStrictModeWithTheProxyOff runs the real agent with the chart's RBAC
// for strictMode and proxy.enabled: false, which lets its account act as a
// person only to review their access: the agent still finds the ceiling
// enforced, the cluster is Ready, and the hub's access reviews filter the
// inventory (admin sees the pod, alice, with no rights to pods, doesn't).
func TestStrictModeWithTheProxyOff(t *testing.T) {
	readable, hidden := unique("pxoff-strict-a"), unique("pxoff-strict-b")
	ns := unique("pxoff-strict-agent")
	setUpPeople(t, readable, hidden) // tether:admins: cluster-admin everywhere
	admin(t, "create", "namespace", ns)
	mustCreatePod(t, readable, "web")
	const release, name = "pxoff-strict", "pxoff-strict"
	saDir := applyAgentRBAC(t, cluster.AdminKubeconfig, release, ns, `
mode: agent
clusterName: `+name+`
agent: {hubUrl: https://tether.example.com, tokenSecret: agent-token}
strictMode: true
allowedNamespaces: [`+readable+`]
proxy: {enabled: false}
`)
	if err := os.WriteFile(filepath.Join(saDir, "ca.crt"), cluster.CAPEM, 0o600); err != nil {
		t.Fatal(err)
	}

	h, hubURL := hub(t, nil, name)
	env := agentEnv(t, name, hubURL, agentToken, saDir)
	// As the chart sets them.
	env["TETHER_STRICT_MODE"], env["TETHER_ALLOWED_NAMESPACES"], env["TETHER_PROXY"] = "true", readable, "false"
	a := start(t, "agent "+name, env, "agent")
	a.waitFor(t, 10*time.Second, "strictMode: the API server enforces the ceiling (constrained impersonation)")
	a.waitFor(t, 10*time.Second, `Connected to `+hubURL+` as "`+name+`"`)
	h.waitFor(t, 15*time.Second, `A cluster is Ready cluster="`+name+`" kubernetesVersion=`+cluster.Version)

	path := "/api/clusters/" + name + "/resources?kind=pods"
	var names []string
	within(t, 15*time.Second, "admin's pods of "+name, func() bool {
		var items []item
		names = nil
		if apiGet(t, hubURL, adminToken, path, &items) != 200 {
			return false // no snapshot yet
		}
		for _, it := range items {
			names = append(names, it.Namespace+"/"+it.Name)
		}
		return slices.Contains(names, readable+"/web")
	})
	if got := itemNames(t, hubURL, aliceToken, path); len(got) != 0 {
		t.Errorf("alice, who may not list pods, sees %v", got)
	}
	if code, body := hubGet(t, hubURL+"/clusters/"+name+"/api", adminToken); code != 503 || !strings.Contains(body, "takes no requests through Tether") {
		t.Errorf("admin's request to %s: %d %s; want the hub's 503", name, code, body)
	}
}
