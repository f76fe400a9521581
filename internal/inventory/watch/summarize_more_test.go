package watch

import (
	"reflect"
	"strings"
	"testing"

	"github.com/tetherhq/tether/internal/inventory"
	"github.com/tetherhq/tether/internal/protocol"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// TestSummarizeMore: the kinds of issue 36, each ready as the issue says,
// and summaries that keep what a person reads.
func TestSummarizeMore(t *testing.T) {
	extra := inventory.Kind{Name: "certificates.cert-manager.io", Group: "cert-manager.io", Versions: []string{"v1"}, Extra: true}
	ref := func(kind, ns, name string) protocol.ResourceRef {
		return protocol.ResourceRef{Kind: kind, Namespace: ns, Name: name}
	}
	long := strings.Repeat("x", 4000)
	for _, tc := range []struct {
		name string
		kind inventory.Kind
		yaml string
		want protocol.Resource
	}{
		{"replicaset all ready", kindOf("replicasets"), `
metadata: {name: web-abc, namespace: shop, ownerReferences: [{kind: Deployment, name: web, controller: true}]}
spec: {replicas: 2, template: {spec: {containers: [{name: a, image: "web:1"}]}}}
status: {replicas: 2, readyReplicas: 2}
`, protocol.Resource{ResourceRef: ref("replicasets", "shop", "web-abc"), Owner: "Deployment/web", Ready: true, Replicas: "2/2", Images: []string{"web:1"}}},
		{"replicaset short", kindOf("replicasets"), `
metadata: {name: web-abc, namespace: shop}
spec: {replicas: 3}
status: {readyReplicas: 1}
`, protocol.Resource{ResourceRef: ref("replicasets", "shop", "web-abc"), Ready: false, Replicas: "1/3"}},
		{"quota", kindOf("resourcequotas"), `
metadata: {name: compute, namespace: shop}
status: {hard: {pods: "10", requests.cpu: "4"}, used: {pods: "10"}}
`, protocol.Resource{ResourceRef: ref("resourcequotas", "shop", "compute"), Ready: true, Quota: []string{"pods 10/10", "requests.cpu 0/4"}}},
		{"warning event", kindOf("events"), `
metadata: {name: web-1.17a, namespace: shop, creationTimestamp: "2026-12-01T10:00:00Z"}
involvedObject: {kind: Pod, name: web-1, namespace: shop}
type: Warning
reason: BackOff
message: Back-off restarting failed container
count: 12
lastTimestamp: "2026-12-01T10:05:00Z"
`, protocol.Resource{ResourceRef: ref("events", "shop", "web-1.17a"), Ready: true, Phase: "Warning", Object: "Pod/web-1", Reason: "BackOff",
			Message: "Back-off restarting failed container", Count: 12, LastSeen: "2026-12-01T10:05:00Z"}},
		{"event of a series", kindOf("events"), `
metadata: {name: n1.1, namespace: default}
involvedObject: {kind: Node, name: n1}
type: Warning
reason: FreeDiskSpaceFailed
eventTime: "2026-12-01T09:00:00.000000Z"
series: {count: 40, lastObservedTime: "2026-12-01T11:00:00.000000Z"}
`, protocol.Resource{ResourceRef: ref("events", "default", "n1.1"), Ready: true, Phase: "Warning", Object: "Node/n1", Reason: "FreeDiskSpaceFailed",
			Count: 40, LastSeen: "2026-12-01T11:00:00.000000Z"}},
		{"virtual service", kindOf("virtualservices"), `
metadata: {name: shop, namespace: shop}
spec: {hosts: [shop.example.com, shop], gateways: [istio-system/public, mesh], http: [{route: [{destination: {host: web}}]}]}
`, protocol.Resource{ResourceRef: ref("virtualservices", "shop", "shop"), Ready: true, Hosts: []string{"shop.example.com", "shop"}, Gateways: []string{"istio-system/public", "mesh"}}},
		{"healthy rollout", kindOf("rollouts"), `
metadata: {name: web, namespace: shop}
spec: {replicas: 4, template: {spec: {containers: [{name: a, image: "web:2"}]}}}
status: {phase: Healthy, readyReplicas: 4, conditions: [{type: Available, status: "True"}, {type: Paused, status: "False"}]}
`, protocol.Resource{ResourceRef: ref("rollouts", "shop", "web"), Ready: true, Phase: "Healthy", Replicas: "4/4", Images: []string{"web:2"}}},
		{"paused rollout", kindOf("rollouts"), `
metadata: {name: web, namespace: shop}
status: {phase: Paused, message: CanaryPauseStep, readyReplicas: 1}
`, protocol.Resource{ResourceRef: ref("rollouts", "shop", "web"), Ready: false, Phase: "Paused", Message: "CanaryPauseStep", Replicas: "1/1"}},
		{"running workflow", kindOf("workflows"), `
metadata: {name: etl-x1, namespace: data}
status: {phase: Running, progress: 1/3, nodes: {etl-x1: {phase: Running, outputs: {parameters: [{name: big, value: "` + long + `"}]}}}}
`, protocol.Resource{ResourceRef: ref("workflows", "data", "etl-x1"), Ready: true, Phase: "Running"}},
		{"failed workflow", kindOf("workflows"), `
metadata: {name: etl-x2, namespace: data}
status: {phase: Failed, message: "` + long + `"}
`, protocol.Resource{ResourceRef: ref("workflows", "data", "etl-x2"), Ready: false, Phase: "Failed", Message: protocol.Clip(long, maxConditionMessage)}},
		{"workflow in error", kindOf("workflows"), `
metadata: {name: etl-x3, namespace: data}
status: {phase: Error}
`, protocol.Resource{ResourceRef: ref("workflows", "data", "etl-x3"), Ready: false, Phase: "Error"}},
		{"workflow template", kindOf("workflowtemplates"), `
metadata: {name: etl, namespace: data}
spec: {templates: [{name: a, container: {image: "etl:1"}}, {name: b, script: {image: "python:3"}}, {name: c, steps: [[{name: s, template: a}]]}]}
`, protocol.Resource{ResourceRef: ref("workflowtemplates", "data", "etl"), Ready: true, Images: []string{"etl:1", "python:3"}}},
		{"failed spark application", kindOf("sparkapplications"), `
metadata: {name: pi, namespace: spark}
spec: {image: "spark:3.5", mainClass: org.apache.spark.examples.SparkPi}
status: {applicationState: {state: FAILED, errorMessage: "driver pod failed"}}
`, protocol.Resource{ResourceRef: ref("sparkapplications", "spark", "pi"), Ready: false, Phase: "FAILED", Message: "driver pod failed", Images: []string{"spark:3.5"}}},
		{"running spark application", kindOf("sparkapplications"), `
metadata: {name: pi, namespace: spark}
status: {applicationState: {state: RUNNING}}
`, protocol.Resource{ResourceRef: ref("sparkapplications", "spark", "pi"), Ready: true, Phase: "RUNNING"}},
		{"extra kind, not ready", extra, `
metadata: {name: tls, namespace: shop, labels: {team: a}}
spec: {secretName: tls}
status: {conditions: [{type: Issuing, status: "True"}, {type: Ready, status: "False", reason: Pending}]}
`, protocol.Resource{ResourceRef: ref("certificates.cert-manager.io", "shop", "tls"), Labels: map[string]string{"team": "a"}, Ready: false,
			Conditions: []protocol.Condition{{Type: "Ready", Status: "False", Reason: "Pending"}}}},
		{"extra kind, available", extra, `
metadata: {name: tls, namespace: shop}
status: {conditions: [{type: Available, status: "True"}]}
`, protocol.Resource{ResourceRef: ref("certificates.cert-manager.io", "shop", "tls"), Ready: true, Conditions: []protocol.Condition{{Type: "Available", Status: "True"}}}},
		{"extra kind, no condition", extra, `
metadata: {name: tls, namespace: shop}
spec: {secretName: tls}
`, protocol.Resource{ResourceRef: ref("certificates.cert-manager.io", "shop", "tls"), Ready: true}},
	} {
		for _, decoding := range []string{"float64", "int64"} {
			t.Run(tc.name+", "+decoding, func(t *testing.T) {
				var obj map[string]any
				if err := yaml.Unmarshal([]byte(tc.yaml), &obj); err != nil {
					t.Fatal(err)
				}
				if decoding == "int64" {
					obj = normalize(obj).(map[string]any)
				}
				got := Summarize(tc.kind, &unstructured.Unstructured{Object: obj})
				if !reflect.DeepEqual(got, tc.want) {
					t.Errorf("got  %+v\nwant %+v", got, tc.want)
				}
			})
		}
	}
}

func kindOf(name string) inventory.Kind {
	k, ok := inventory.LookupKind(name)
	if !ok {
		panic("no kind " + name)
	}
	return k
}
