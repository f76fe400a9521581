package watch

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/tetherhq/tether/internal/inventory"
	"github.com/tetherhq/tether/internal/protocol"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

func TestSummarize(t *testing.T) {
	for _, tc := range []struct {
		name, kind, yaml string
		want             protocol.Resource
	}{
		{"ready pod", "pods", `
metadata: {name: web-1, namespace: shop, labels: {app: web}, managedFields: [{manager: kubectl}],
  ownerReferences: [{kind: ReplicaSet, name: web-abc, controller: true, apiVersion: apps/v1, uid: x}]}
spec: {containers: [{name: a, image: "web:1"}, {name: b, image: "proxy:2"}], initContainers: [{name: i, image: "init:1"}]}
status:
  phase: Running
  conditions: [{type: Ready, status: "True"}, {type: PodScheduled, status: "True"}]
  containerStatuses: [{name: a, restartCount: 2}, {name: b, restartCount: 1}]
`, protocol.Resource{ResourceRef: protocol.ResourceRef{Kind: "pods", Namespace: "shop", Name: "web-1"}, Labels: map[string]string{"app": "web"},
			Owner: "ReplicaSet/web-abc", Phase: "Running", Ready: true, Images: []string{"init:1", "web:1", "proxy:2"}, Restarts: 3}},
		{"crashing pod", "pods", `
metadata: {name: web-2, namespace: shop}
spec: {containers: [{name: a, image: "web:1"}]}
status:
  phase: Running
  conditions: [{type: Ready, status: "False", reason: ContainersNotReady, message: "containers with unready status: [a]"}]
  containerStatuses: [{name: a, restartCount: 7, state: {waiting: {reason: CrashLoopBackOff}}}]
`, protocol.Resource{ResourceRef: protocol.ResourceRef{Kind: "pods", Namespace: "shop", Name: "web-2"}, Phase: "CrashLoopBackOff", Ready: false,
			Images: []string{"web:1"}, Restarts: 7, Conditions: []protocol.Condition{{Type: "Ready", Status: "False", Reason: "ContainersNotReady", Message: "containers with unready status: [a]"}}}},
		{"finished pod", "pods", `
metadata: {name: job-1, namespace: batch}
status: {phase: Succeeded}
`, protocol.Resource{ResourceRef: protocol.ResourceRef{Kind: "pods", Namespace: "batch", Name: "job-1"}, Phase: "Succeeded", Ready: true}},
		{"deployment short of replicas", "deployments", `
metadata: {name: web, namespace: shop}
spec: {replicas: 3, template: {spec: {containers: [{name: a, image: "web:1"}]}}}
status: {readyReplicas: 2, conditions: [{type: Available, status: "True"}, {type: Progressing, status: "True"}]}
`, protocol.Resource{ResourceRef: protocol.ResourceRef{Kind: "deployments", Namespace: "shop", Name: "web"}, Ready: false, Replicas: "2/3", Images: []string{"web:1"}}},
		{"daemonset", "daemonsets", `
metadata: {name: agent, namespace: kube-system}
status: {desiredNumberScheduled: 4, numberReady: 4}
`, protocol.Resource{ResourceRef: protocol.ResourceRef{Kind: "daemonsets", Namespace: "kube-system", Name: "agent"}, Ready: true, Replicas: "4/4"}},
		{"node", "nodes", `
metadata: {name: n1}
status: {nodeInfo: {kubeletVersion: v1.36.3}, conditions: [{type: Ready, status: "True"}, {type: MemoryPressure, status: "True", reason: KubeletHasInsufficientMemory}, {type: DiskPressure, status: "False"}]}
`, protocol.Resource{ResourceRef: protocol.ResourceRef{Kind: "nodes", Name: "n1"}, Ready: true, Version: "v1.36.3",
			Conditions: []protocol.Condition{{Type: "MemoryPressure", Status: "True", Reason: "KubeletHasInsufficientMemory"}}}},
		{"failed job", "jobs", `
metadata: {name: migrate, namespace: shop}
status: {conditions: [{type: Failed, status: "True", reason: BackoffLimitExceeded}]}
`, protocol.Resource{ResourceRef: protocol.ResourceRef{Kind: "jobs", Namespace: "shop", Name: "migrate"}, Phase: "Failed", Ready: false,
			Conditions: []protocol.Condition{{Type: "Failed", Status: "True", Reason: "BackoffLimitExceeded"}}}},
		{"application", "applications", `
metadata: {name: shop, namespace: argocd}
status: {sync: {status: OutOfSync}, health: {status: Healthy}}
`, protocol.Resource{ResourceRef: protocol.ResourceRef{Kind: "applications", Namespace: "argocd", Name: "shop"}, Ready: false, Sync: "OutOfSync", Health: "Healthy"}},
		{"gateway", "gateways", `
metadata: {name: public, namespace: istio-system}
spec: {servers: [{hosts: ["shop/shop.example.com", "*.example.com"]}, {hosts: ["*.example.com", "api.example.com"]}]}
`, protocol.Resource{ResourceRef: protocol.ResourceRef{Kind: "gateways", Namespace: "istio-system", Name: "public"}, Ready: true, Hosts: []string{"shop.example.com", "*.example.com", "api.example.com"}}},
		{"terminating namespace", "namespaces", `
metadata: {name: old}
status: {phase: Terminating}
`, protocol.Resource{ResourceRef: protocol.ResourceRef{Kind: "namespaces", Name: "old"}, Phase: "Terminating", Ready: false}},
	} {
		// Numbers as the reflector's encoding/json gives them (float64),
		// and as the API machinery's decoder does (int64).
		for _, decoding := range []string{"float64", "int64"} {
			t.Run(tc.name+", "+decoding, func(t *testing.T) {
				var obj map[string]any
				if err := yaml.Unmarshal([]byte(tc.yaml), &obj); err != nil {
					t.Fatal(err)
				}
				if decoding == "int64" {
					obj = normalize(obj).(map[string]any)
				}
				k, _ := inventory.LookupKind(tc.kind)
				got := Summarize(k, &unstructured.Unstructured{Object: obj})
				if !reflect.DeepEqual(got, tc.want) {
					t.Errorf("got  %+v\nwant %+v", got, tc.want)
				}
			})
		}
	}
}

// normalize turns the float64 numbers of a YAML decode into the int64s the
// API machinery's JSON decoding gives unstructured objects.
func normalize(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			v[k] = normalize(x)
		}
	case []any:
		for i, x := range v {
			v[i] = normalize(x)
		}
	case float64:
		return int64(v)
	}
	return v
}

// FuzzSummarize feeds objects, decoded as the reflector decodes what the API
// server sends (untrusted: an aggregated API's server, or a CRD's, writes
// them), to the summary of every kind: it never panics, and its counts are
// never negative.
func FuzzSummarize(f *testing.F) {
	f.Add([]byte(`{"metadata":{"name":"web","namespace":"shop"},"spec":{"replicas":3},"status":{"readyReplicas":2}}`))
	f.Add([]byte(`{"metadata":{"name":"p"},"status":{"phase":"Running","containerStatuses":[{"restartCount":1e300},{"restartCount":-4},{"restartCount":2147483647}]}}`))
	f.Add([]byte(`{"status":{"conditions":[{"type":"Ready"},7,null],"sync":{"status":1},"health":"x"},"spec":{"servers":[{"hosts":["a/b","*"]}]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var obj map[string]any
		if json.Unmarshal(b, &obj) != nil || obj == nil {
			return
		}
		for _, k := range inventory.Kinds {
			r := Summarize(k, &unstructured.Unstructured{Object: obj})
			if r.Kind != k.Name {
				t.Fatalf("%s: summarized as kind %q", k.Name, r.Kind)
			}
			if r.Restarts < 0 {
				t.Fatalf("%s: %d restarts", k.Name, r.Restarts)
			}
		}
	})
}

// TestDescribeIsClipped: a kind's error, as the agent sends it, fits its
// bound however long the error.
func TestDescribeIsClipped(t *testing.T) {
	long := errors.New("the authorization webhook said no: " + strings.Repeat("because ", 1000))
	if got := describe(long); len(got) > maxKindError || !strings.HasPrefix(got, "the authorization webhook said no: because") {
		t.Errorf("describe of a %d-byte error: %d bytes, %q…, want at most %d", len(long.Error()), len(got), got[:40], maxKindError)
	}
}
