package chart

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tetherhq/tether/internal/testutil/helmtest"
)

// peerPort is where hub replicas reach each other (TETHER_PEER_LISTEN_ADDR).
const peerPort = 8444

// hubSelector is what the chart's selector labels are for release r.
func hubSelector(r string) map[string]any {
	return map[string]any{
		"app.kubernetes.io/name":      "tether",
		"app.kubernetes.io/instance":  r,
		"app.kubernetes.io/component": "hub",
	}
}

// With hub.replicas above 1 the hubs coordinate through Leases (SPEC
// section 8): the settings that make them, the peer port, the token to
// reach the API server with, a Role for Leases alone, a
// PodDisruptionBudget, a spread across nodes, an update that never runs
// fewer, and a drain the grace period and readiness probe match.
func TestHubReplicas(t *testing.T) {
	h := helmtest.New(t)
	const release = "hub-replicas"
	objs := render(t, h, release, "tether", caseValues(t, release))
	var d deployment
	decode(t, only(t, objs, "Deployment"), &d)
	pod := d.Spec.Template.Spec
	ctr := pod.Containers[0]

	if d.Spec.Replicas == nil || *d.Spec.Replicas != 3 {
		t.Errorf("replicas %s, want hub.replicas' 3", js(d.Spec.Replicas))
	}
	if s := d.Spec.Strategy; s.Type != "RollingUpdate" || s.RollingUpdate == nil || js(s.RollingUpdate.MaxUnavailable) != "0" || js(s.RollingUpdate.MaxSurge) != "1" {
		t.Errorf("strategy %s, want RollingUpdate with maxUnavailable 0 and maxSurge 1", js(s))
	}

	for k, want := range map[string]string{
		"TETHER_COORDINATION":           "kubernetes",
		"TETHER_PEER_ADDR":              "$(POD_IP):8444",
		"TETHER_PEER_LISTEN_ADDR":       ":8444",
		"TETHER_DRAIN_DELAY_SECONDS":    "10",
		"TETHER_SHUTDOWN_GRACE_SECONDS": "30",
		"TETHER_TOKEN_SIGNING_KEY_FILE": "/etc/tether/signing-key/signing-key.pem",
	} {
		if got := env(ctr, k); got != want {
			t.Errorf("%s %q, want %q", k, got, want)
		}
	}
	for k, want := range map[string]string{
		"TETHER_COORDINATION_NAMESPACE": "metadata.namespace",
		"TETHER_REPLICA_NAME":           "metadata.name",
		"POD_IP":                        "status.podIP",
	} {
		if e := ctr.envVar(k); e == nil || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != want {
			t.Errorf("%s %s, want it from the pod's %s", k, js(e), want)
		}
	}
	// Kubernetes expands $(POD_IP) only from a variable defined before.
	if i, j := envIndex(ctr, "POD_IP"), envIndex(ctr, "TETHER_PEER_ADDR"); i < 0 || i > j {
		t.Errorf("POD_IP is at %d, TETHER_PEER_ADDR at %d: $(POD_IP) would stay as written", i, j)
	}
	if !slices.ContainsFunc(ctr.Ports, func(p struct {
		Name          string
		ContainerPort int
		Protocol      string
	}) bool {
		return p.Name == "peer" && p.ContainerPort == peerPort && p.Protocol == "TCP"
	}) {
		t.Errorf("ports %s, want peer on %d", js(ctr.Ports), peerPort)
	}
	if pod.AutomountServiceAccountToken == nil || !*pod.AutomountServiceAccountToken {
		t.Error("the replicas' pod doesn't mount its service account token, which they reach their Leases with")
	}

	// The drain: the pod leaves the Service within the drain delay, and
	// the kubelet waits for the drain, the grace and the agents' goodbyes.
	p := ctr.ReadinessProbe
	if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" {
		t.Fatalf("readiness probe %s, want GET /readyz", js(p))
	}
	if outAfter := p.PeriodSeconds * max(p.FailureThreshold, 1); p.PeriodSeconds == 0 || outAfter > 10/2 {
		t.Errorf("readiness probe %s: a draining pod leaves the Service %d s after its /readyz fails, want at most half the 10 s drain delay", js(p), outAfter)
	}
	if g := pod.TerminationGracePeriodSeconds; g == nil || *g != 10+30+15 {
		t.Errorf("terminationGracePeriodSeconds %s, want the drain's 10 s, the grace's 30 s and 15 s for the agents", js(g))
	}

	want := []map[string]any{{
		"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
		"labelSelector":  map[string]any{"matchLabels": hubSelector(release)},
		"matchLabelKeys": []string{"pod-template-hash"},
	}}
	if got := js(pod.TopologySpreadConstraints); got != jsNormal(t, want) {
		t.Errorf("topologySpreadConstraints %s, want %s", got, jsNormal(t, want))
	}
	if !matches(hubSelector(release), d.Spec.Template.Metadata.Labels) {
		t.Errorf("the pod's labels %s don't match the selector %s", js(d.Spec.Template.Metadata.Labels), js(hubSelector(release)))
	}

	// RBAC: one Role for Leases in the release's namespace, bound to the
	// hub's ServiceAccount; nothing cluster-wide.
	for _, o := range objs {
		if o.Kind() == "ClusterRole" || o.Kind() == "ClusterRoleBinding" {
			t.Errorf("%s %s: the replicas need nothing cluster-wide", o.Kind(), o.Name())
		}
	}
	var role struct {
		Metadata struct{ Name, Namespace string }
		Rules    []struct{ APIGroups, Resources, Verbs, ResourceNames []string }
	}
	decode(t, only(t, objs, "Role"), &role)
	if role.Metadata.Namespace != "tether" || len(role.Rules) != 1 ||
		!slices.Equal(role.Rules[0].APIGroups, []string{"coordination.k8s.io"}) ||
		!slices.Equal(role.Rules[0].Resources, []string{"leases"}) ||
		!slices.Equal(role.Rules[0].Verbs, []string{"get", "list", "watch", "create", "update", "delete"}) {
		t.Errorf("Role %s, want leases.coordination.k8s.io: get, list, watch, create, update, delete, in the release's namespace", js(role))
	}
	var binding struct {
		RoleRef  struct{ Kind, Name string }
		Subjects []struct{ Kind, Name, Namespace string }
	}
	decode(t, only(t, objs, "RoleBinding"), &binding)
	if binding.RoleRef.Kind != "Role" || binding.RoleRef.Name != role.Metadata.Name || len(binding.Subjects) != 1 ||
		binding.Subjects[0].Kind != "ServiceAccount" || binding.Subjects[0].Name != pod.ServiceAccountName || binding.Subjects[0].Namespace != "tether" {
		t.Errorf("RoleBinding %s, want Role %s bound to ServiceAccount tether/%s", js(binding), role.Metadata.Name, pod.ServiceAccountName)
	}
	if sa := only(t, objs, "ServiceAccount"); sa.Name() != pod.ServiceAccountName {
		t.Errorf("ServiceAccount %s, the pod runs as %s", sa.Name(), pod.ServiceAccountName)
	}

	var pdb struct {
		Spec struct {
			MaxUnavailable any
			MinAvailable   any
			Selector       struct{ MatchLabels map[string]any }
		}
	}
	decode(t, only(t, objs, "PodDisruptionBudget"), &pdb)
	if js(pdb.Spec.MaxUnavailable) != "1" || pdb.Spec.MinAvailable != nil || js(pdb.Spec.Selector.MatchLabels) != js(hubSelector(release)) {
		t.Errorf("PodDisruptionBudget %s, want maxUnavailable 1 of the hub's pods", js(pdb))
	}

	if rule := peerRule(t, objs); rule == nil {
		t.Error("the NetworkPolicy lets nothing in on the peer port")
	} else if js(rule["from"]) != jsNormal(t, []any{map[string]any{"podSelector": map[string]any{"matchLabels": hubSelector(release)}}}) {
		t.Errorf("the peer port's NetworkPolicy rule %s, want from the release's hub pods alone", js(rule))
	}
}

// The values that shape replicas: the drain, the user's own spread, and
// rbac.create.
func TestHubReplicasOptions(t *testing.T) {
	h := helmtest.New(t)
	values := hubValues + "  signingKeySecret: k\n  replicas: 2\n"

	objs := render(t, h, "r", "tether", values+"  drainDelaySeconds: 5\n  shutdownGraceSeconds: 20\n")
	var d deployment
	decode(t, only(t, objs, "Deployment"), &d)
	if got := env(d.Spec.Template.Spec.Containers[0], "TETHER_DRAIN_DELAY_SECONDS"); got != "5" {
		t.Errorf("TETHER_DRAIN_DELAY_SECONDS %q, want drainDelaySeconds' 5", got)
	}
	if g := d.Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || *g != 5+20+15 {
		t.Errorf("terminationGracePeriodSeconds %s, want 5 + 20 + 15", js(g))
	}

	own := `{"maxSkew": 2, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app.kubernetes.io/component": "hub"}}}`
	objs = render(t, h, "r", "tether", values+"topologySpreadConstraints:\n  - "+own+"\n")
	d = deployment{} // decode merges into maps it finds
	decode(t, only(t, objs, "Deployment"), &d)
	if got, want := js(d.Spec.Template.Spec.TopologySpreadConstraints), jsNormal(t, json.RawMessage("["+own+"]")); got != want {
		t.Errorf("topologySpreadConstraints %s, want the values' own %s alone", got, want)
	}

	objs = render(t, h, "r", "tether", values+"rbac:\n  create: false\n")
	for _, o := range objs {
		if o.Kind() == "Role" || o.Kind() == "RoleBinding" {
			t.Errorf("rbac.create false makes %s %s", o.Kind(), o.Name())
		}
	}
	only(t, objs, "PodDisruptionBudget")
}

// A single hub (hub.replicas 1, the default) renders none of what
// replicas need: no coordination, no token, no Role, no
// PodDisruptionBudget, no spread, no peer port.
func TestSingleHubHasNoReplicaObjects(t *testing.T) {
	h := helmtest.New(t)
	for _, name := range []string{"hub", "hub-full", "hub-plain"} {
		t.Run(name, func(t *testing.T) {
			values := caseValues(t, name)
			if name == "hub" {
				values += "  replicas: 1\n"
			}
			objs := render(t, h, name, "tether", values)
			for _, o := range objs {
				switch o.Kind() {
				case "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding", "PodDisruptionBudget":
					t.Errorf("a single hub renders %s %s", o.Kind(), o.Name())
				}
			}
			var d deployment
			decode(t, only(t, objs, "Deployment"), &d)
			pod := d.Spec.Template.Spec
			ctr := pod.Containers[0]
			for _, e := range ctr.Env {
				if strings.HasPrefix(e.Name, "TETHER_COORDINATION") || strings.HasPrefix(e.Name, "TETHER_PEER_") || e.Name == "TETHER_REPLICA_NAME" || e.Name == "POD_IP" {
					t.Errorf("a single hub gets %s", e.Name)
				}
			}
			if env(ctr, "TETHER_DRAIN_DELAY_SECONDS") != "10" {
				t.Errorf("TETHER_DRAIN_DELAY_SECONDS %q, want the default 10", env(ctr, "TETHER_DRAIN_DELAY_SECONDS"))
			}
			for _, p := range ctr.Ports {
				if p.ContainerPort == peerPort || p.Name == "peer" {
					t.Errorf("a single hub has port %s", js(p))
				}
			}
			if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
				t.Errorf("automountServiceAccountToken %s, want false: a single hub talks to no API server of its own cluster", js(pod.AutomountServiceAccountToken))
			}
			if d.Spec.Strategy.Type != "" || pod.TopologySpreadConstraints != nil {
				t.Errorf("strategy %s, topologySpreadConstraints %s: want neither", js(d.Spec.Strategy), js(pod.TopologySpreadConstraints))
			}
			if name != "hub" && peerRule(t, objs) != nil {
				t.Error("a single hub's NetworkPolicy lets peers in")
			}
		})
	}
}

// peerRule is the ingress rule of the rendered NetworkPolicy for the peer
// port, nil when there is none.
func peerRule(t *testing.T, objs []helmtest.Object) map[string]any {
	t.Helper()
	var np struct {
		Spec struct{ Ingress []map[string]any }
	}
	decode(t, only(t, objs, "NetworkPolicy"), &np)
	for _, r := range np.Spec.Ingress {
		ports, _ := r["ports"].([]any)
		for _, p := range ports {
			if m, _ := p.(map[string]any); m != nil && js(m["port"]) == js(peerPort) {
				return r
			}
		}
	}
	return nil
}

func envIndex(c container, name string) int {
	return slices.IndexFunc(c.Env, func(e envVar) bool { return e.Name == name })
}

// matches says whether labels has every key and value of selector.
func matches(selector map[string]any, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// jsNormal is v as js shows it after a trip through JSON into any, so
// that it compares with a decoded object whatever Go types v holds.
func jsNormal(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var a any
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatal(err)
	}
	return js(a)
}

// checkReplicasRBAC asks the API server what the hub replicas'
// ServiceAccount may do: their Leases in the release's namespace, and
// nothing else; then makes, renews and deletes a Lease as it, with its own
// token, as a replica does.
func checkReplicasRBAC(t *testing.T, k kube, ns, saName string) {
	sa := "system:serviceaccount:" + ns + ":" + saName
	for _, verb := range []string{"get", "list", "watch", "create", "update", "delete"} {
		if !k.allowed(sa, access{verb: verb, group: "coordination.k8s.io", resource: "leases", namespace: ns}) {
			t.Errorf("%s may not %s leases in %s", sa, verb, ns)
		}
	}
	for _, a := range []access{
		{verb: "list", group: "coordination.k8s.io", resource: "leases", namespace: "kube-system"},
		{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: "default"},
		{verb: "list", group: "coordination.k8s.io", resource: "leases"},
		{verb: "deletecollection", group: "coordination.k8s.io", resource: "leases", namespace: ns},
		{verb: "get", resource: "secrets", namespace: ns},
		{verb: "list", resource: "pods", namespace: ns},
		{verb: "create", resource: "configmaps", namespace: ns},
		{verb: "update", group: "apps", resource: "deployments", namespace: ns},
		{verb: "create", group: "rbac.authorization.k8s.io", resource: "rolebindings", namespace: ns},
		{verb: "impersonate", resource: "users"},
	} {
		if k.allowed(sa, a) {
			t.Errorf("%s may %s in %q: the replicas need their Leases alone", sa, a, a.namespace)
		}
	}

	token := strings.TrimSpace(k.must("create", "token", saName, "-n", ns, "--duration=10m"))
	lease := filepath.Join(t.TempDir(), "lease.yaml")
	write := func(holder string) {
		t.Helper()
		body := "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: tether-replica-" + saName + "-0\n" +
			"  namespace: " + ns + "\n  labels: {tetherhq.github.io/role: hub-replica}\nspec:\n  holderIdentity: " + holder + "\n  leaseDurationSeconds: 15\n"
		if err := os.WriteFile(lease, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("a")
	k.must("create", "--token="+token, "-f", lease)
	write("b")
	k.must("replace", "--token="+token, "-f", lease)
	if got := k.must("get", "--token="+token, "leases", "-n", ns, "-l", "tetherhq.github.io/role=hub-replica", "-o", "jsonpath={.items[*].spec.holderIdentity}"); got != "b" {
		t.Errorf("the Lease's holder %q, want b", got)
	}
	k.must("delete", "--token="+token, "-f", lease)
	if out, err := k.run("get", "--token="+token, "leases", "-n", "default"); err == nil || !strings.Contains(out, "Forbidden") {
		t.Errorf("listing Leases in default as %s: %v\n%s\nwant Forbidden", sa, err, out)
	}
}
