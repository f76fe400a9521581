package watch

import (
	"fmt"
	"math"
	"sort"

	"github.com/tetherhq/tether/internal/protocol"
)

// summarizeMore summarizes the kinds of issue 36, what operators look at
// besides workloads. Each keeps what a person reads and nothing else: an
// Argo Workflow's status holds every node it ran and can be a megabyte,
// and its summary is its phase and message.
func summarizeMore(kind string, o map[string]any, r *protocol.Resource) {
	switch kind {
	case "resourcequotas":
		// Always ready: a quota that is full says so in its numbers.
		for res, hard := range stringMap(o, "status", "hard") {
			used := stringMap(o, "status", "used")[res]
			if used == "" {
				used = "0"
			}
			r.Quota = append(r.Quota, res+" "+used+"/"+hard)
		}
		sort.Strings(r.Quota)
	case "events":
		summarizeEvent(o, r)
	case "virtualservices":
		r.Hosts = stringList(o, "spec", "hosts")
		r.Gateways = stringList(o, "spec", "gateways")
	case "rollouts":
		r.Phase = str(o, "status", "phase")
		r.Ready = r.Phase == "Healthy"
		r.Message = clipMessage(str(o, "status", "message"))
		r.Images = images(o, "spec", "template", "spec")
		desired, found := integer(o, "spec", "replicas")
		if !found {
			desired = 1
		}
		ready, _ := integer(o, "status", "readyReplicas")
		r.Replicas = fmt.Sprintf("%d/%d", ready, desired)
		r.Conditions = abnormal(conditions(o, "status", "conditions"), map[string]string{"Paused": "False", "InvalidSpec": "False"}, "True")
	case "workflows":
		// status.nodes and the rest of the status are never looked at.
		r.Phase = str(o, "status", "phase")
		r.Ready = r.Phase != "Failed" && r.Phase != "Error"
		r.Message = clipMessage(str(o, "status", "message"))
	case "workflowtemplates":
		for _, t := range slice(o, "spec", "templates") {
			if m, ok := t.(map[string]any); ok {
				for _, field := range []string{"container", "script"} {
					if img := str(m, field, "image"); img != "" {
						r.Images = appendNew(r.Images, img)
					}
				}
			}
		}
	case "sparkapplications":
		r.Phase = str(o, "status", "applicationState", "state")
		r.Ready = r.Phase != "FAILED"
		r.Message = clipMessage(str(o, "status", "applicationState", "errorMessage"))
		if img := str(o, "spec", "image"); img != "" {
			r.Images = []string{img}
		}
	}
}

// summarizeEvent keeps what the cluster page shows beside the object an
// event is about: its reason, message, count and when it last happened.
// Only Warning events are watched (inventory.Kinds); the hub shows the
// last few per object, one per reason.
func summarizeEvent(o map[string]any, r *protocol.Resource) {
	if kind, name := str(o, "involvedObject", "kind"), str(o, "involvedObject", "name"); name != "" {
		r.Object = kind + "/" + name
	}
	r.Phase = str(o, "type")
	r.Reason = str(o, "reason")
	r.Message = clipMessage(str(o, "message"))
	n, _ := integer(o, "count")
	if series, ok := integer(o, "series", "count"); ok && series > n {
		n = series
	}
	r.Count = int32(min(max(n, 0), math.MaxInt32))
	for _, at := range [][]string{{"series", "lastObservedTime"}, {"lastTimestamp"}, {"eventTime"}, {"firstTimestamp"}, {"metadata", "creationTimestamp"}} {
		if t := str(o, at...); t != "" {
			r.LastSeen = t
			break
		}
	}
}

// summarizeGeneric summarizes a kind of TETHER_INVENTORY_KINDS_EXTRA,
// which Tether knows nothing of: name, namespace, labels and owner (as
// every kind), and its Ready condition, or else its Available one, when
// it has either. Without one it is ready.
func summarizeGeneric(o map[string]any, r *protocol.Resource) {
	conds := conditions(o, "status", "conditions")
	for _, typ := range []string{"Ready", "Available"} {
		for _, c := range conds {
			if c.Type == typ {
				r.Ready = c.Status == "True"
				r.Conditions = []protocol.Condition{c}
				return
			}
		}
	}
}

func clipMessage(s string) string { return protocol.Clip(s, maxConditionMessage) }

// stringList lists the non-empty strings of the list at path, once each.
func stringList(o map[string]any, path ...string) []string {
	var out []string
	for _, v := range slice(o, path...) {
		if s, ok := v.(string); ok && s != "" {
			out = appendNew(out, s)
		}
	}
	return out
}

// stringMap returns the strings of the map at path; a quantity the
// decoder read as a number is written back as one.
func stringMap(o map[string]any, path ...string) map[string]string {
	var cur any = o
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[p]
	}
	m, _ := cur.(map[string]any)
	out := make(map[string]string, len(m))
	for k, v := range m {
		switch v := v.(type) {
		case string:
			out[k] = v
		case float64, int64:
			out[k] = fmt.Sprint(v)
		}
	}
	return out
}
