package watch

import (
	"fmt"
	"math"
	"strings"

	"github.com/tetherhq/tether/internal/inventory"
	"github.com/tetherhq/tether/internal/protocol"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// maxConditionMessage bounds a condition's message: enough to say why, not
// a stack trace.
const maxConditionMessage = 256

// Summarize reduces obj, of kind k, to the fields the hub shows. It keeps
// nothing of obj: the result shares no maps or slices with it.
func Summarize(k inventory.Kind, obj *unstructured.Unstructured) protocol.Resource {
	o := obj.Object
	r := protocol.Resource{
		ResourceRef: protocol.ResourceRef{Kind: k.Name, Namespace: obj.GetNamespace(), Name: obj.GetName()},
		Labels:      copyLabels(obj.GetLabels()),
		Ready:       true,
	}
	for _, ref := range obj.GetOwnerReferences() {
		if ref.Controller != nil && *ref.Controller {
			r.Owner = ref.Kind + "/" + ref.Name
		}
	}
	if k.Extra {
		summarizeGeneric(o, &r)
		return r
	}
	switch k.Name {
	case "nodes":
		r.Conditions = conditions(o, "status", "conditions")
		r.Ready = conditionTrue(r.Conditions, "Ready")
		r.Version = str(o, "status", "nodeInfo", "kubeletVersion")
		r.Conditions = abnormal(r.Conditions, map[string]string{"Ready": "True"}, "False")
	case "namespaces":
		r.Phase = str(o, "status", "phase")
		r.Ready = r.Phase != "Terminating"
	case "pods":
		summarizePod(o, &r)
	case "deployments", "statefulsets", "daemonsets", "replicasets":
		summarizeWorkload(k.Name, o, &r)
	case "jobs":
		r.Images = images(o, "spec", "template", "spec")
		r.Conditions = conditions(o, "status", "conditions")
		r.Ready = !conditionTrue(r.Conditions, "Failed")
		switch {
		case conditionTrue(r.Conditions, "Complete"):
			r.Phase = "Complete"
		case !r.Ready:
			r.Phase = "Failed"
		default:
			r.Phase = "Running"
		}
	case "cronjobs":
		r.Images = images(o, "spec", "jobTemplate", "spec", "template", "spec")
		if b, _, _ := unstructured.NestedBool(o, "spec", "suspend"); b {
			r.Phase = "Suspended"
		}
	case "services":
		r.Phase = str(o, "spec", "type")
	case "ingresses":
		for _, rule := range slice(o, "spec", "rules") {
			if m, ok := rule.(map[string]any); ok {
				if h := str(m, "host"); h != "" {
					r.Hosts = append(r.Hosts, h)
				}
			}
		}
	case "applications":
		r.Sync = str(o, "status", "sync", "status")
		r.Health = str(o, "status", "health", "status")
		r.Ready = r.Sync == "Synced" && r.Health == "Healthy"
		r.Conditions = conditions(o, "status", "conditions")
	case "resourcequotas", "events", "virtualservices", "rollouts", "workflows", "workflowtemplates", "sparkapplications":
		summarizeMore(k.Name, o, &r)
	case "gateways":
		for _, s := range slice(o, "spec", "servers") {
			m, ok := s.(map[string]any)
			if !ok {
				continue
			}
			for _, h := range slice(m, "hosts") {
				if h, ok := h.(string); ok && h != "" {
					r.Hosts = appendNew(r.Hosts, gatewayHost(h))
				}
			}
		}
	}
	return r
}

func summarizePod(o map[string]any, r *protocol.Resource) {
	r.Phase = str(o, "status", "phase")
	if reason := str(o, "status", "reason"); reason != "" {
		r.Phase = reason // Evicted, NodeLost: what people look for
	}
	r.Images = images(o, "spec")
	conds := conditions(o, "status", "conditions")
	r.Ready = r.Phase == "Succeeded" || (r.Phase == "Running" && conditionTrue(conds, "Ready"))
	r.Conditions = abnormal(conds, nil, "True")
	for _, c := range slice(o, "status", "containerStatuses") {
		m, ok := c.(map[string]any)
		if !ok {
			continue
		}
		if n, _ := integer(m, "restartCount"); n > 0 {
			r.Restarts = int32(min(int64(r.Restarts)+n, math.MaxInt32))
		}
		// A container waiting (CrashLoopBackOff, ImagePullBackOff) says
		// more than the pod's phase.
		if why := str(m, "state", "waiting", "reason"); why != "" && !r.Ready {
			r.Phase = why
		}
	}
}

func summarizeWorkload(kind string, o map[string]any, r *protocol.Resource) {
	r.Images = images(o, "spec", "template", "spec")
	r.Conditions = conditions(o, "status", "conditions")
	var desired, ready int64
	if kind == "daemonsets" {
		desired, _ = integer(o, "status", "desiredNumberScheduled")
		ready, _ = integer(o, "status", "numberReady")
	} else {
		var found bool
		desired, found = integer(o, "spec", "replicas")
		if !found {
			desired = 1
		}
		ready, _ = integer(o, "status", "readyReplicas")
	}
	r.Replicas = fmt.Sprintf("%d/%d", ready, desired)
	r.Ready = ready >= desired
	r.Conditions = abnormal(r.Conditions, map[string]string{"ReplicaFailure": "False"}, "True")
}

// abnormal keeps the conditions whose status isn't the good one: good[type]
// when listed, otherwise def. A healthy object then carries none.
func abnormal(conds []protocol.Condition, good map[string]string, def string) []protocol.Condition {
	var out []protocol.Condition
	for _, c := range conds {
		want, ok := good[c.Type]
		if !ok {
			want = def
		}
		if c.Status != want {
			out = append(out, c)
		}
	}
	return out
}

func conditions(o map[string]any, path ...string) []protocol.Condition {
	var out []protocol.Condition
	for _, c := range slice(o, path...) {
		m, ok := c.(map[string]any)
		if !ok {
			continue
		}
		msg := protocol.Clip(str(m, "message"), maxConditionMessage)
		out = append(out, protocol.Condition{Type: str(m, "type"), Status: str(m, "status"), Reason: str(m, "reason"), Message: msg})
	}
	return out
}

func conditionTrue(conds []protocol.Condition, typ string) bool {
	for _, c := range conds {
		if c.Type == typ {
			return c.Status == "True"
		}
	}
	return false
}

// images lists the images of a pod spec's containers, in order, once each.
func images(o map[string]any, podSpec ...string) []string {
	var out []string
	for _, field := range []string{"initContainers", "containers"} {
		for _, c := range slice(o, append(podSpec, field)...) {
			if m, ok := c.(map[string]any); ok {
				if img := str(m, "image"); img != "" {
					out = appendNew(out, img)
				}
			}
		}
	}
	return out
}

// gatewayHost drops the "namespace/" an Istio Gateway host may start with.
func gatewayHost(h string) string {
	if i := strings.IndexByte(h, '/'); i >= 0 {
		return h[i+1:]
	}
	return h
}

func appendNew(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}

func str(o map[string]any, path ...string) string {
	s, _, _ := unstructured.NestedString(o, path...)
	return s
}

// integer reads the whole number at path. The reflector decodes objects with
// encoding/json, which gives numbers as float64; the API machinery's decoder
// gives int64. Both are read; anything else, or nothing, is 0 and false.
func integer(o map[string]any, path ...string) (int64, bool) {
	v, found, err := unstructured.NestedFieldNoCopy(o, path...)
	if !found || err != nil {
		return 0, false
	}
	switch n := v.(type) {
	case int64:
		return n, true
	case float64:
		if n != math.Trunc(n) || math.Abs(n) > 1<<53 {
			return 0, false
		}
		return int64(n), true
	}
	return 0, false
}

func slice(o map[string]any, path ...string) []any {
	var cur any = o
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[p]
	}
	s, _ := cur.([]any)
	return s
}

func copyLabels(l map[string]string) map[string]string {
	if len(l) == 0 {
		return nil
	}
	out := make(map[string]string, len(l))
	for k, v := range l {
		out[k] = v
	}
	return out
}
