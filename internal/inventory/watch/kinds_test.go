package watch_test

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/inventory"
	hubstore "github.com/tetherhq/tether/internal/inventory/store"
	"github.com/tetherhq/tether/internal/inventory/watch"
	"github.com/tetherhq/tether/internal/localkube"
	"github.com/tetherhq/tether/internal/protocol"
	"sigs.k8s.io/yaml"
)

// installCRDs creates the CRDs of testdata/crds.yaml, if missing, and
// waits until the API server serves each.
func installCRDs(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile("testdata/crds.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var crd map[string]any
		if err := yaml.Unmarshal([]byte(doc), &crd); err != nil {
			t.Fatal(err)
		}
		if crd == nil {
			continue // the file's comment
		}
		err := apiServer(t).Do(t.Context(), "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd, nil)
		var apiErr *localkube.APIError
		if err != nil && !(errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusConflict) {
			t.Fatal(err)
		}
		names = append(names, crd["metadata"].(map[string]any)["name"].(string))
	}
	for _, name := range names {
		eventually(t, 30*time.Second, "CRD "+name+" established", func() bool {
			var crd struct {
				Status struct {
					Conditions []struct{ Type, Status string }
				}
			}
			if apiServer(t).Do(t.Context(), "GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"+name, nil, &crd) != nil {
				return false
			}
			return slices.ContainsFunc(crd.Status.Conditions, func(c struct{ Type, Status string }) bool {
				return c.Type == "Established" && c.Status == "True"
			})
		})
	}
}

// mustCreate creates the object of manifest (YAML) at path.
func mustCreate(t *testing.T, path, manifest string) {
	t.Helper()
	var obj map[string]any
	if err := yaml.Unmarshal([]byte(manifest), &obj); err != nil {
		t.Fatal(err)
	}
	mustDo(t, "POST", path, obj)
}

// grantExtra lets the service account inv-kinds/agent read the extra
// kinds, as the chart's inventory.extraKinds grants them.
func grantExtra(t *testing.T) {
	t.Helper()
	for _, o := range []struct{ path, yaml string }{
		{"/apis/rbac.authorization.k8s.io/v1/clusterroles", `
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: inv-kinds-extra}
rules:
- {apiGroups: [cert-manager.io], resources: [certificates, clusterissuers], verbs: [get, list, watch]}
- {apiGroups: [""], resources: [configmaps], verbs: [get, list, watch]}`},
		{"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", `
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: inv-kinds-extra}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: inv-kinds-extra}
subjects: [{kind: ServiceAccount, name: agent, namespace: inv-kinds}]`},
	} {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(o.yaml), &obj); err != nil {
			t.Fatal(err)
		}
		err := apiServer(t).Do(t.Context(), "POST", o.path, obj, nil)
		var apiErr *localkube.APIError
		if err != nil && !(errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusConflict) {
			t.Fatal(err)
		}
	}
}

// TestEachKindAgainstItsRealAPI: every kind of issue 36, made in the real
// API server (the CRDs of testdata), arrives at the hub's store summarized
// and ready as the issue says; only Warning events arrive, and the store
// answers an object's events one per reason; the extra kinds, namespaced
// and cluster-scoped, arrive summarized generically.
func TestEachKindAgainstItsRealAPI(t *testing.T) {
	ctx := t.Context()
	kube := apiServer(t)
	installCRDs(t)
	saDir, err := kube.NewServiceAccountDir(ctx, "inv-kinds", "agent")
	if err != nil {
		t.Fatal(err)
	}
	if err := kube.GrantInventory(ctx, "inv-kinds", "agent"); err != nil {
		t.Fatal(err)
	}
	grantExtra(t)
	ns := unique("inv-kinds")
	mustNamespace(t, ns)

	core, apps := "/api/v1/namespaces/"+ns, "/apis/apps/v1/namespaces/"+ns
	argo := "/apis/argoproj.io/v1alpha1/namespaces/" + ns
	rs := func(name string, replicas int) string {
		return `{apiVersion: apps/v1, kind: ReplicaSet, metadata: {name: ` + name + `},
spec: {replicas: ` + strconv.Itoa(replicas) + `, selector: {matchLabels: {app: ` + name + `}},
  template: {metadata: {labels: {app: ` + name + `}}, spec: {containers: [{name: a, image: "web:1"}]}}}}`
	}
	mustCreate(t, apps+"/replicasets", rs("web-ready", 2))
	mustCreate(t, apps+"/replicasets", rs("web-short", 3))
	// A ReplicaSet's status is its controller's to write: here, the test's.
	mustDo(t, "PATCH", apps+"/replicasets/web-ready/status", map[string]any{"status": map[string]any{"replicas": 2, "readyReplicas": 2}})
	mustDo(t, "PATCH", apps+"/replicasets/web-short/status", map[string]any{"status": map[string]any{"replicas": 3, "readyReplicas": 1}})
	mustCreate(t, core+"/resourcequotas", `{apiVersion: v1, kind: ResourceQuota, metadata: {name: compute}, spec: {hard: {pods: "10"}}}`)
	mustDo(t, "PATCH", core+"/resourcequotas/compute/status", map[string]any{"status": map[string]any{"hard": map[string]any{"pods": "10"}, "used": map[string]any{"pods": "4"}}})
	event := func(name, typ, reason, at string) string {
		return `{apiVersion: v1, kind: Event, metadata: {name: ` + name + `}, involvedObject: {kind: Pod, name: web-1, namespace: ` + ns + `},
type: ` + typ + `, reason: ` + reason + `, message: "` + reason + ` at ` + at + `", count: 3, firstTimestamp: "` + at + `", lastTimestamp: "` + at + `"}`
	}
	mustCreate(t, core+"/events", event("web-1.a", "Warning", "BackOff", "2026-12-01T10:00:00Z"))
	mustCreate(t, core+"/events", event("web-1.b", "Warning", "BackOff", "2026-12-01T10:05:00Z"))
	mustCreate(t, core+"/events", event("web-1.c", "Warning", "Unhealthy", "2026-12-01T10:03:00Z"))
	mustCreate(t, core+"/events", event("web-1.d", "Normal", "Pulled", "2026-12-01T10:06:00Z"))
	mustCreate(t, "/apis/networking.istio.io/v1/namespaces/"+ns+"/virtualservices", `{apiVersion: networking.istio.io/v1, kind: VirtualService, metadata: {name: shop},
spec: {hosts: [shop.example.com], gateways: [istio-system/public], http: [{route: [{destination: {host: web}}]}]}}`)
	mustCreate(t, argo+"/rollouts", `{apiVersion: argoproj.io/v1alpha1, kind: Rollout, metadata: {name: healthy},
spec: {replicas: 2, template: {spec: {containers: [{name: a, image: "web:2"}]}}}, status: {phase: Healthy, readyReplicas: 2}}`)
	mustCreate(t, argo+"/rollouts", `{apiVersion: argoproj.io/v1alpha1, kind: Rollout, metadata: {name: paused},
status: {phase: Paused, message: CanaryPauseStep}}`)
	// A workflow's status holds every node it ran: here, half a megabyte.
	nodes := map[string]any{}
	for i := range 500 {
		nodes["etl-big-"+strconv.Itoa(i)] = map[string]any{
			"phase": "Succeeded", "message": strings.Repeat("log line ", 100)}
	}
	mustDo(t, "POST", argo+"/workflows", map[string]any{"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
		"metadata": map[string]any{"name": "etl-big"}, "status": map[string]any{"phase": "Running", "nodes": nodes}})
	mustCreate(t, argo+"/workflows", `{apiVersion: argoproj.io/v1alpha1, kind: Workflow, metadata: {name: etl-failed}, status: {phase: Failed, message: "child failed"}}`)
	mustCreate(t, argo+"/workflows", `{apiVersion: argoproj.io/v1alpha1, kind: Workflow, metadata: {name: etl-error}, status: {phase: Error}}`)
	mustCreate(t, argo+"/workflowtemplates", `{apiVersion: argoproj.io/v1alpha1, kind: WorkflowTemplate, metadata: {name: etl},
spec: {templates: [{name: a, container: {image: "etl:1"}}]}}`)
	spark := "/apis/sparkoperator.k8s.io/v1beta2/namespaces/" + ns + "/sparkapplications"
	mustCreate(t, spark, `{apiVersion: sparkoperator.k8s.io/v1beta2, kind: SparkApplication, metadata: {name: pi-failed},
spec: {image: "spark:3.5"}, status: {applicationState: {state: FAILED, errorMessage: driver pod failed}}}`)
	mustCreate(t, spark, `{apiVersion: sparkoperator.k8s.io/v1beta2, kind: SparkApplication, metadata: {name: pi-running}, status: {applicationState: {state: RUNNING}}}`)
	mustCreate(t, "/apis/cert-manager.io/v1/namespaces/"+ns+"/certificates", `{apiVersion: cert-manager.io/v1, kind: Certificate, metadata: {name: tls, labels: {team: a}},
spec: {secretName: tls}, status: {conditions: [{type: Ready, status: "False", reason: Pending}]}}`)
	mustCreate(t, "/apis/cert-manager.io/v1/clusterissuers", `{apiVersion: cert-manager.io/v1, kind: ClusterIssuer, metadata: {name: `+ns+`},
status: {conditions: [{type: Ready, status: "True"}]}}`)
	mustCreate(t, core+"/configmaps", `{apiVersion: v1, kind: ConfigMap, metadata: {name: settings}, data: {a: b}}`)

	extra, err := inventory.ParseExtraKinds("cert-manager.io/v1/certificates, cert-manager.io/v1/clusterissuers, v1/configmaps")
	if err != nil {
		t.Fatal(err)
	}
	w := newTestWatcherWith(t, saDir, extra)
	runWatcher(t, w)
	store := hubstore.New(hubstore.Config{})
	stream(t, w, store, "kinds", "")

	type want struct {
		name  string
		ready bool
		check func(protocol.Resource) bool
	}
	for kind, wants := range map[string][]want{
		"replicasets": {
			{"web-ready", true, func(r protocol.Resource) bool {
				return r.Replicas == "2/2" && slices.Equal(r.Images, []string{"web:1"})
			}},
			{"web-short", false, func(r protocol.Resource) bool { return r.Replicas == "1/3" }},
		},
		"resourcequotas": {{"compute", true, func(r protocol.Resource) bool { return slices.Equal(r.Quota, []string{"pods 4/10"}) }}},
		"virtualservices": {{"shop", true, func(r protocol.Resource) bool {
			return slices.Equal(r.Hosts, []string{"shop.example.com"}) && slices.Equal(r.Gateways, []string{"istio-system/public"})
		}}},
		"rollouts": {
			{"healthy", true, func(r protocol.Resource) bool { return r.Phase == "Healthy" && r.Replicas == "2/2" }},
			{"paused", false, func(r protocol.Resource) bool { return r.Message == "CanaryPauseStep" }},
		},
		"workflows": {
			{"etl-big", true, func(r protocol.Resource) bool { return r.Phase == "Running" }},
			{"etl-error", false, nil},
			{"etl-failed", false, func(r protocol.Resource) bool { return r.Message == "child failed" }},
		},
		"workflowtemplates": {{"etl", true, func(r protocol.Resource) bool { return slices.Equal(r.Images, []string{"etl:1"}) }}},
		"sparkapplications": {
			{"pi-failed", false, func(r protocol.Resource) bool {
				return r.Message == "driver pod failed" && slices.Equal(r.Images, []string{"spark:3.5"})
			}},
			{"pi-running", true, nil},
		},
		"events": {
			{"web-1.a", true, func(r protocol.Resource) bool {
				return r.Object == "Pod/web-1" && r.Reason == "BackOff" && r.Count == 3
			}},
			{"web-1.b", true, nil},
			{"web-1.c", true, nil},
		},
		"certificates.cert-manager.io": {{"tls", false, func(r protocol.Resource) bool {
			return r.Labels["team"] == "a" && len(r.Conditions) == 1 && r.Conditions[0].Reason == "Pending"
		}}},
		"configmaps": {{"settings", true, nil}},
	} {
		var got []hubstore.Item
		eventually(t, 15*time.Second, kind+" in the store", func() bool {
			got, _ = store.Select("kinds", hubstore.Query{Kind: kind, Namespace: ns}, allow)
			return len(got) == len(wants)
		})
		for i, wt := range wants {
			r := got[i].Resource
			if r.Name != wt.name || r.Ready != wt.ready || wt.check != nil && !wt.check(r) {
				t.Errorf("%s %d: %+v\nwant %s, ready %v", kind, i, r, wt.name, wt.ready)
			}
		}
	}
	// A cluster-scoped extra kind, its scope as discovery says.
	eventually(t, 15*time.Second, "the cluster issuer", func() bool {
		items, _ := store.Select("kinds", hubstore.Query{Kind: "clusterissuers.cert-manager.io"}, allow)
		return slices.ContainsFunc(items, func(it hubstore.Item) bool { return it.Name == ns && it.Namespace == "" && it.Ready })
	})
	// The extra kinds say what they are, for the hub's access reviews.
	info, _ := store.Info("kinds")
	described := map[string]string{}
	for _, k := range info.Kinds {
		if k.Resource != "" {
			described[k.Kind] = fmt.Sprintf("%s %s %v", k.Group, k.Resource, k.Namespaced)
		}
	}
	if want := map[string]string{
		"certificates.cert-manager.io":   "cert-manager.io certificates true",
		"clusterissuers.cert-manager.io": "cert-manager.io clusterissuers false",
		"configmaps":                     " configmaps true",
	}; !maps.Equal(described, want) {
		t.Errorf("extra kinds described as %q, want %q", described, want)
	}
	// The object's events, one per reason, the newest first.
	var evs []string
	for _, it := range store.Events("kinds", ns, "Pod/web-1", allow) {
		evs = append(evs, it.Name)
	}
	if !slices.Equal(evs, []string{"web-1.b", "web-1.c"}) {
		t.Errorf("events of Pod/web-1: %v, want web-1.b (BackOff, latest) and web-1.c (Unhealthy)", evs)
	}
}

// newTestWatcherWith is newTestWatcher with extra kinds.
func newTestWatcherWith(t *testing.T, saDir string, extra []inventory.Kind) *watch.Watcher {
	t.Helper()
	w, err := watch.New(watch.Config{
		Host: apiServer(t).URL, CAFile: filepath.Join(saDir, "ca.crt"), TokenFile: filepath.Join(saDir, "token"),
		ExtraKinds: extra, Rediscover: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestAllowedNamespacesWithClusterScopedRights: with allowedNamespaces and
// the chart's inventory.clusterScoped (Roles in the allowed namespaces, a
// ClusterRole for nodes and namespaces only), nodes are streamed, so the
// fleet card counts them, and of the namespaces only the allowed ones.
func TestAllowedNamespacesWithClusterScopedRights(t *testing.T) {
	ctx := t.Context()
	kube := apiServer(t)
	saDir, err := kube.NewServiceAccountDir(ctx, "inv-scoped", "agent")
	if err != nil {
		t.Fatal(err)
	}
	scopedA, other := unique("scoped-a"), unique("scoped-other")
	if err := kube.GrantInventory(ctx, "inv-scoped", "agent", scopedA); err != nil {
		t.Fatal(err)
	}
	mustNamespace(t, other)
	mustCreate(t, "/apis/rbac.authorization.k8s.io/v1/clusterroles", `{apiVersion: rbac.authorization.k8s.io/v1, kind: ClusterRole,
metadata: {name: inv-scoped-cluster}, rules: [{apiGroups: [""], resources: [nodes, namespaces], verbs: [get, list, watch]}]}`)
	mustCreate(t, "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", `{apiVersion: rbac.authorization.k8s.io/v1, kind: ClusterRoleBinding,
metadata: {name: inv-scoped-cluster}, roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: inv-scoped-cluster},
subjects: [{kind: ServiceAccount, name: agent, namespace: inv-scoped}]}`)
	mustNode(t, "scoped-node")

	w := newTestWatcher(t, saDir, scopedA)
	runWatcher(t, w)
	store := hubstore.New(hubstore.Config{})
	stream(t, w, store, "scoped", "")
	eventually(t, 15*time.Second, "nodes counted, and only the allowed namespace", func() bool {
		info, _ := store.Info("scoped")
		return info.Summary.NodesTotal != nil && *info.Summary.NodesTotal >= 1 &&
			slices.Equal(names(store, "scoped", "namespaces"), []string{"/" + scopedA})
	})
	if got := names(store, "scoped", "pods"); len(got) != 0 {
		t.Errorf("pods streamed: %v", got)
	}
}

// mustNode registers a node object, if missing: the test API server runs
// no kubelet unless asked.
func mustNode(t *testing.T, name string) {
	t.Helper()
	err := apiServer(t).Do(t.Context(), "POST", "/api/v1/nodes", map[string]any{"apiVersion": "v1", "kind": "Node", "metadata": map[string]any{"name": name}}, nil)
	var apiErr *localkube.APIError
	if err != nil && !(errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusConflict) {
		t.Fatal(err)
	}
}
