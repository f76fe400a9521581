package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/agent"
	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/hub"
	"github.com/tetherhq/tether/internal/protocol"
	"github.com/tetherhq/tether/internal/testutil/fakecluster"
	"github.com/tetherhq/tether/internal/web"
)

// TestProxyOffCluster: a cluster whose agent runs with TETHER_PROXY=false
// (SPEC section 9) takes no one's requests: the hub answers them 503 with
// a Status saying so, and nothing reaches the API server. Its own probes
// and access reviews still go through, so the cluster is Ready and its
// inventory is filtered by each person's RBAC. /api/clusters says which
// halves each connected agent runs.
func TestProxyOffCluster(t *testing.T) {
	fc := fakecluster.New(t)
	answerAccessReviews(t, fc, func(_, _, namespace string) bool { return namespace == "team-a" })
	h, _ := proxyHub(t, fc, "")
	far := startAgent(t, h.url, "far", fc, func(c *agent.Config) { c.ProxyOff = true })
	eventually(t, 5*time.Second, "far connects", far.Connected)
	eventually(t, 5*time.Second, "far Ready through the hub's own probes", func() bool { return statusOf(h, "far") == hub.Ready })

	cluster := func(name string) web.ClusterJSON {
		t.Helper()
		code, body, _ := call(t, "GET", h.url+"/api/clusters/"+name, aliceToken, nil)
		var c web.ClusterJSON
		if code != http.StatusOK || json.Unmarshal([]byte(body), &c) != nil {
			t.Fatalf("/api/clusters/%s: %d %s", name, code, body)
		}
		return c
	}
	if c := cluster("far"); c.Halves == nil || c.Halves.Proxy || !c.Halves.Inventory {
		t.Errorf("/api/clusters/far halves = %+v, want proxy false, inventory true", c.Halves)
	}
	if c := cluster("open"); c.Halves == nil || !c.Halves.Proxy || !c.Halves.Inventory {
		t.Errorf("/api/clusters/open halves = %+v, want both true", c.Halves)
	}

	before := fc.Count("/api/v1/namespaces")
	code, body, _ := call(t, "GET", h.url+"/clusters/far/api/v1/namespaces", aliceToken, nil)
	var st struct {
		Kind, Reason, Message string
		Code                  int
	}
	if code != http.StatusServiceUnavailable || json.Unmarshal([]byte(body), &st) != nil || st.Kind != "Status" ||
		!strings.Contains(st.Message, `Cluster "far" takes no requests through Tether`) {
		t.Errorf("a person's request to far: %d %s; want a 503 Status saying it takes no requests", code, body)
	}
	if n := fc.Count("/api/v1/namespaces"); n != before {
		t.Errorf("the API server had %d requests for /api/v1/namespaces, want %d: a person's request got through", n, before)
	}
	// The same request to a cluster whose agent proxies gets there.
	if code, body, _ := call(t, "GET", h.url+"/clusters/open/api/v1/namespaces", aliceToken, nil); code != http.StatusOK {
		t.Errorf("the request to open: %d %s, want 200", code, body)
	}

	// Past kubeproxy's check the hub opens no stream for a person's
	// request either.
	req, err := http.NewRequestWithContext(t.Context(), "GET", "https://"+hub.APIServerName+"/version", nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := h.registry.Reach("far").RoundTrip(req); !errors.Is(err, hub.ErrProxyOff) {
		if err == nil {
			resp.Body.Close()
		}
		t.Errorf("a request not the hub's own, sent to far's connection: %v, want ErrProxyOff", err)
	}

	feed(t, h, h.inventory.Receiver("far"), "far", &protocol.Update{Snapshot: true, Complete: true,
		Kinds: []protocol.KindState{{Kind: "pods"}}, Upserts: []protocol.Resource{res("pods", "team-a", "web", true), res("pods", "team-b", "db", true)}})
	reviews := fc.Count(reviewsPath)
	code, body, _ = call(t, "GET", h.url+"/api/clusters/far/resources?kind=pods", aliceToken, nil)
	if code != http.StatusOK || !strings.Contains(body, `"name":"web"`) || strings.Contains(body, `"name":"db"`) {
		t.Errorf("far's pods for alice: %d %s; want web (team-a) and not db (team-b)", code, body)
	}
	if fc.Count(reviewsPath) == reviews {
		t.Errorf("no access review reached far's API server")
	}
}

// TestHalvesInTheAPI: /api/clusters says which halves each connected agent
// runs, from its hello, and nothing of a cluster whose agent isn't
// connected.
func TestHalvesInTheAPI(t *testing.T) {
	fc := fakecluster.New(t)
	people, err := auth.New(auth.Config{Users: testUsers})
	if err != nil {
		t.Fatal(err)
	}
	defer people.Close()
	h := startHub(t, Config{Agents: testAgents("eu-1", "us-1"), Auth: people})
	a := startAgent(t, h.url, "eu-1", fc, func(c *agent.Config) { c.InventoryOff = true })
	eventually(t, 5*time.Second, "eu-1 connects", a.Connected)
	code, body, _ := call(t, "GET", h.url+"/api/clusters", aliceToken, nil)
	var list []web.ClusterJSON
	if code != http.StatusOK || json.Unmarshal([]byte(body), &list) != nil || len(list) != 2 {
		t.Fatalf("/api/clusters: %d %s", code, body)
	}
	if c := list[0]; c.Name != "eu-1" || c.Halves == nil || !c.Halves.Proxy || c.Halves.Inventory {
		t.Errorf("eu-1: %s halves %+v, want proxy true, inventory false", c.Name, c.Halves)
	}
	if c := list[1]; c.Name != "us-1" || c.Halves != nil {
		t.Errorf("us-1, with no agent: halves %+v, want none", c.Halves)
	}
}
