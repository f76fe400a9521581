package server

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"

	"github.com/tetherhq/tether/internal/inventory/store"
	"github.com/tetherhq/tether/internal/protocol"
	"github.com/tetherhq/tether/internal/testutil/fakecluster"
)

// names lists the "namespace/name" of a JSON array of items.
func names(t *testing.T, body string) string {
	t.Helper()
	var items []store.Item
	if err := json.Unmarshal([]byte(body), &items); err != nil {
		t.Fatalf("not a JSON array of items: %v\n%s", err, body)
	}
	var out []string
	for _, it := range items {
		out = append(out, it.Namespace+"/"+it.Name)
	}
	return strings.Join(out, " ")
}

// TestExtraKindsAsked: a kind of the agent's TETHER_INVENTORY_KINDS_EXTRA
// is asked for by the name the cluster's inventory announces, and the
// access reviews ask about its group and resource: alice, who may list
// appprojects in team-a alone, sees only that one, in the cluster's answer
// and the fleet's. A kind no cluster announces is refused, and so is one
// whose name says another resource than the agent says it is.
func TestExtraKindsAsked(t *testing.T) {
	fc := fakecluster.New(t)
	var mu sync.Mutex
	var asked []string
	answerReviews(t, fc, func(user string, a *authorizationv1.ResourceAttributes) bool {
		mu.Lock()
		asked = append(asked, a.Group+"/"+a.Resource)
		mu.Unlock()
		switch user {
		case "bob":
			return true
		case "alice":
			return a.Verb == "list" && a.Group == "argoproj.io" && a.Resource == "appprojects" && a.Namespace == "team-a"
		}
		return false
	})
	h, _ := proxyHub(t, fc, "")
	project := "appprojects.argoproj.io"
	feed(t, h, h.inventory.Receiver("open"), "open", &protocol.Update{Snapshot: true, Complete: true,
		Kinds: []protocol.KindState{
			{Kind: "pods"},
			{Kind: project, Group: "argoproj.io", Resource: "appprojects", Namespaced: true},
			{Kind: "clusterissuers.cert-manager.io", Group: "cert-manager.io", Resource: "clusterissuers"},
			// An agent whose name and resource disagree.
			{Kind: "notes.example.com", Group: "", Resource: "secrets", Namespaced: true},
		},
		Upserts: []protocol.Resource{
			res(project, "team-a", "shop", true), res(project, "team-b", "billing", true),
			res("clusterissuers.cert-manager.io", "", "letsencrypt", true),
			res("notes.example.com", "team-a", "n", true),
		}})

	for _, c := range []struct{ path, token, want string }{
		{"/api/clusters/open/resources?kind=" + project, aliceToken, "team-a/shop"},
		{"/api/clusters/open/resources?kind=" + project, bobToken, "team-a/shop team-b/billing"},
		{"/api/resources?kind=" + project, aliceToken, "team-a/shop"},
		{"/api/resources?kind=" + project, bobToken, "team-a/shop team-b/billing"},
		{"/api/clusters/open/resources?kind=clusterissuers.cert-manager.io", aliceToken, ""},
		{"/api/clusters/open/resources?kind=clusterissuers.cert-manager.io", bobToken, "/letsencrypt"},
	} {
		code, body, _ := call(t, "GET", h.url+c.path, c.token, nil)
		if code != 200 {
			t.Errorf("%s: %d %s", c.path, code, body)
			continue
		}
		if got := names(t, body); got != c.want {
			t.Errorf("%s as %s: %q, want %q", c.path, map[string]string{aliceToken: "alice", bobToken: "bob"}[c.token], got, c.want)
		}
	}
	for _, kind := range []string{"widgets.example.com", "notes.example.com"} {
		for _, path := range []string{"/api/clusters/open/resources?kind=", "/api/resources?kind="} {
			if code, body, _ := call(t, "GET", h.url+path+kind, bobToken, nil); code != http.StatusBadRequest || !strings.Contains(body, "is not one Tether keeps") {
				t.Errorf("%s%s: %d %s, want 400", path, kind, code, body)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if slices.Contains(asked, "/secrets") {
		t.Errorf("the hub asked about secrets: %v", asked)
	}
	if !slices.Contains(asked, "cert-manager.io/clusterissuers") {
		t.Errorf("no review asked about clusterissuers in cert-manager.io: %v", asked)
	}
}

// TestObjectEventsFiltered: /events names an object's Warning events, the
// latest of each reason, newest first, and only where the person may list
// events; a node's are found in whichever namespace Kubernetes filed them.
func TestObjectEventsFiltered(t *testing.T) {
	fc := fakecluster.New(t)
	answerAccessReviews(t, fc, func(user, resource, namespace string) bool {
		return user == "bob" || resource == "events" && namespace == "team-a"
	})
	h, _ := proxyHub(t, fc, "")
	event := func(ns, name, object, reason, lastSeen string, count int32) protocol.Resource {
		r := res("events", ns, name, true)
		r.Object, r.Reason, r.LastSeen, r.Count, r.Message = object, reason, lastSeen, count, reason+" of "+object
		return r
	}
	feed(t, h, h.inventory.Receiver("open"), "open", &protocol.Update{Snapshot: true, Complete: true,
		Kinds: []protocol.KindState{{Kind: "events"}},
		Upserts: []protocol.Resource{
			event("team-a", "e1", "Pod/web-1", "BackOff", "2026-12-03T10:00:00Z", 3),
			event("team-a", "e2", "Pod/web-1", "BackOff", "2026-12-03T11:00:00Z", 7),
			event("team-a", "e3", "Pod/web-1", "FailedMount", "2026-12-03T10:30:00Z", 1),
			event("team-a", "e4", "Pod/web-2", "BackOff", "2026-12-03T12:00:00Z", 1),
			event("team-b", "e5", "Pod/web-1", "BackOff", "2026-12-03T12:00:00Z", 1),
			event("default", "e6", "Node/n1", "NodeNotReady", "2026-12-03T09:00:00Z", 2),
		}})
	get := func(query, token string) (int, string) {
		t.Helper()
		code, body, _ := call(t, "GET", h.url+"/api/clusters/open/events?"+query, token, nil)
		return code, body
	}
	for _, c := range []struct{ query, token, want string }{
		{"namespace=team-a&object=Pod/web-1", aliceToken, "team-a/e2 team-a/e3"},
		{"namespace=team-b&object=Pod/web-1", aliceToken, ""},
		{"namespace=team-b&object=Pod/web-1", bobToken, "team-b/e5"},
		{"object=Node/n1", aliceToken, ""},
		{"object=Node/n1", bobToken, "default/e6"},
	} {
		code, body := get(c.query, c.token)
		if code != 200 {
			t.Errorf("%s: %d %s", c.query, code, body)
			continue
		}
		if got := names(t, body); got != c.want {
			t.Errorf("%s: %q, want %q", c.query, got, c.want)
		}
	}
	code, body := get("namespace=team-a&object=Pod/web-1", aliceToken)
	var items []store.Item
	json.Unmarshal([]byte(body), &items)
	if code != 200 || len(items) == 0 || items[0].Reason != "BackOff" || items[0].Count != 7 || items[0].LastSeen != "2026-12-03T11:00:00Z" || items[0].Message != "BackOff of Pod/web-1" {
		t.Errorf("the latest BackOff: %d %s", code, body)
	}
	for _, q := range []string{"", "object=web-1", "object=Pod/", "namespace=Team_A&object=Pod/web-1"} {
		if code, body := get(q, aliceToken); code != http.StatusBadRequest {
			t.Errorf("%q: %d %s, want 400", q, code, body)
		}
	}
	if code, body, _ := call(t, "GET", h.url+"/api/clusters/ops/events?object=Pod/web-1&namespace=team-a", aliceToken, nil); code != http.StatusNotFound {
		t.Errorf("ops, which alice may not see: %d %s, want 404", code, body)
	}
}

// TestDomainsFiltered: /domains lists the hosts the cluster's gateways
// expose, each with the gateway that wins it, as far as the person may
// list gateways: a host won by a gateway they may not list is left out,
// and a person who may list none sees none.
func TestDomainsFiltered(t *testing.T) {
	fc := fakecluster.New(t)
	answerAccessReviews(t, fc, func(user, resource, namespace string) bool {
		return user == "bob" || user == "alice" && resource == "gateways" && namespace == "team-a"
	})
	h, _ := proxyHub(t, fc, "")
	main, team, other := res("gateways", "istio-system", "main", true), res("gateways", "team-a", "gw", true), res("gateways", "team-b", "gw", true)
	main.Hosts, team.Hosts, other.Hosts = []string{"*.example.com"}, []string{"api.example.com", "team.internal"}, []string{"team.internal"}
	feed(t, h, h.inventory.Receiver("open"), "open", &protocol.Update{Snapshot: true, Complete: true, GatewayTieBreaker: "istio-system/main",
		Kinds: []protocol.KindState{{Kind: "gateways"}}, Upserts: []protocol.Resource{main, team, other}})
	domains := func(who http.Header, token string) []store.Domain {
		t.Helper()
		code, body, _ := call(t, "GET", h.url+"/api/clusters/open/domains", token, who)
		var out []store.Domain
		if code != 200 || json.Unmarshal([]byte(body), &out) != nil || !strings.HasPrefix(body, "[") {
			t.Fatalf("%d %s", code, body)
		}
		return out
	}
	show := func(ds []store.Domain) string {
		var out []string
		for _, d := range ds {
			s := d.Host + "→" + d.Gateway
			if len(d.Candidates) > 0 {
				s += "(" + strings.Join(d.Candidates, ",") + ")"
			}
			if d.Conflict != "" {
				s += "!"
			}
			out = append(out, s)
		}
		return strings.Join(out, " ")
	}
	if got, want := show(domains(nil, bobToken)), "*.example.com→istio-system/main api.example.com→istio-system/main(istio-system/main,team-a/gw) team.internal→(team-a/gw,team-b/gw)!"; got != want {
		t.Errorf("bob:\ngot  %s\nwant %s", got, want)
	}
	if got, want := show(domains(nil, aliceToken)), "team.internal→(team-a/gw)!"; got != want {
		t.Errorf("alice:\ngot  %s\nwant %s", got, want)
	}
	carol := http.Header{"X-Remote-User": {"carol"}}
	if got := domains(carol, ""); len(got) != 0 {
		t.Errorf("carol, who may list no gateway: %+v", got)
	}
	if code, body, _ := call(t, "GET", h.url+"/api/clusters/ops/domains", aliceToken, nil); code != http.StatusNotFound {
		t.Errorf("ops, which alice may not see: %d %s, want 404", code, body)
	}
	// A mistyped path names the endpoints, these among them.
	if code, body, _ := call(t, "GET", h.url+"/api/clusters/open/domain", aliceToken, nil); code != http.StatusNotFound ||
		!strings.Contains(body, "/api/clusters/<name>/domains, ") || !strings.Contains(body, "/api/clusters/<name>/events?namespace=…&object=Kind/name, ") {
		t.Errorf("a mistyped path: %d %s", code, body)
	}
}
