package server

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/inventory/store"
	"github.com/tetherhq/tether/internal/protocol"
	"github.com/tetherhq/tether/internal/testutil/fakecluster"
	"github.com/tetherhq/tether/internal/web"
)

// TestFleetResourcesComeClusterByCluster: a fleet-wide query writes each
// cluster's items as soon as the clusters before it are done, in the
// clusters' order, instead of holding the whole answer until the last
// cluster has answered. Here the access review for cluster ops waits until
// the reader has seen cluster open's pod.
func TestFleetResourcesComeClusterByCluster(t *testing.T) {
	fc := fakecluster.New(t)
	gate := make(chan struct{})
	answerAccessReviews(t, fc, func(_, _, namespace string) bool {
		if namespace == "late" {
			<-gate
		}
		return namespace != "" // per namespace, never cluster-wide
	})
	// The hub waits for the review as long as the test may.
	h, _ := proxyHub(t, fc, "", func(c *Config) { c.ProbeTimeout = time.Minute })
	var open sync.Once
	release := func() { open.Do(func() { close(gate) }) }
	t.Cleanup(release) // before the servers close, which waits for the review
	for _, c := range []struct{ cluster, namespace, pod string }{{"open", "early", "web"}, {"ops", "late", "db"}} {
		feed(t, h, h.inventory.Receiver(c.cluster), c.cluster, &protocol.Update{Snapshot: true, Complete: true,
			Kinds: []protocol.KindState{{Kind: "pods"}}, Upserts: []protocol.Resource{res("pods", c.namespace, c.pod, true)}})
	}

	type begun struct {
		resp  *http.Response
		br    *bufio.Reader
		first string // open's item, whole
		err   error
	}
	first := make(chan begun, 1)
	go func() {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", h.url+"/api/resources?kind=pods", nil)
		req.Header.Set("Authorization", "Bearer "+bobToken) // bob sees open and ops
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			first <- begun{err: err}
			return
		}
		// An item's closing brace and what follows it come only with the
		// next item or the end.
		br := bufio.NewReader(resp.Body)
		s, err := br.ReadString('}')
		first <- begun{resp, br, s, err}
	}()
	select {
	case b := <-first:
		if b.err != nil {
			t.Fatal(b.err)
		}
		defer b.resp.Body.Close()
		s := b.first
		if b.resp.StatusCode != 200 || b.resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("%d %s", b.resp.StatusCode, b.resp.Header.Get("Content-Type"))
		}
		if !strings.Contains(s, `"cluster":"open"`) || !strings.Contains(s, `"name":"web"`) {
			t.Fatalf("the answer began with %q, want open's pod web", s)
		}
		release()
		rest, err := io.ReadAll(b.br)
		if err != nil {
			t.Fatal(err)
		}
		var items []store.Item
		if err := json.Unmarshal([]byte(s+string(rest)), &items); err != nil {
			t.Fatalf("not a JSON array: %v\n%s%s", err, s, rest)
		}
		var got []string
		for _, it := range items {
			got = append(got, it.Cluster+"/"+it.Namespace+"/"+it.Name)
		}
		if strings.Join(got, " ") != "open/early/web ops/late/db" {
			t.Errorf("items %v, want open's pod, then ops's", got)
		}
	case <-time.After(10 * time.Second):
		release()
		t.Fatal("nothing of the answer came while cluster ops's access review waited")
	}
}

// TestFleetResourcesReaderLeaves: a reader that leaves in the middle of a
// fleet-wide answer stops it; the query it waited on finishes, and nothing
// is left running (the package checks for leaked goroutines at its end).
func TestFleetResourcesReaderLeaves(t *testing.T) {
	fc := fakecluster.New(t)
	gate := make(chan struct{})
	asked := make(chan struct{}, 4)
	answerAccessReviews(t, fc, func(_, _, namespace string) bool {
		if namespace == "late" {
			asked <- struct{}{}
			<-gate
		}
		return namespace != ""
	})
	h, _ := proxyHub(t, fc, "", func(c *Config) { c.ProbeTimeout = time.Minute })
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release)
	for _, c := range []struct{ cluster, namespace string }{{"open", "early"}, {"ops", "late"}} {
		feed(t, h, h.inventory.Receiver(c.cluster), c.cluster, &protocol.Update{Snapshot: true, Complete: true,
			Kinds: []protocol.KindState{{Kind: "pods"}}, Upserts: []protocol.Resource{res("pods", c.namespace, "p", true)}})
	}
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, "GET", h.url+"/api/resources?kind=pods", nil)
	req.Header.Set("Authorization", "Bearer "+bobToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-asked:
	case <-time.After(10 * time.Second):
		t.Fatal("ops's access review never came")
	}
	cancel() // the reader leaves while ops is asked about
	resp.Body.Close()
	release()
	if code, body, _ := call(t, "GET", h.url+"/api/resources?kind=pods", bobToken, nil); code != 200 || !strings.Contains(body, `"cluster":"ops"`) {
		t.Errorf("the next query: %d %s", code, body)
	}
}

// TestNoGatewaySaysWhy: when no gateway serves a host because the inventory
// has no gateways to look at, the answer says why.
func TestNoGatewaySaysWhy(t *testing.T) {
	fc := fakecluster.New(t)
	answerAccessReviews(t, fc, func(user, resource, namespace string) bool { return true })
	h, _ := proxyHub(t, fc, "")
	gateways := func(state protocol.KindState) string {
		t.Helper()
		feed(t, h, h.inventory.Receiver("open"), "open", &protocol.Update{Snapshot: true, Complete: true,
			Kinds: []protocol.KindState{{Kind: "pods"}, state}})
		code, body, _ := call(t, "GET", h.url+"/api/clusters/open/gateways?host=shop.example.com", aliceToken, nil)
		if code != http.StatusNotFound {
			t.Errorf("%+v: %d %s, want 404", state, code, body)
		}
		var g web.GatewayJSON
		json.Unmarshal([]byte(body), &g)
		return g.Error
	}
	// What isn't a domain name is refused, not matched.
	for _, host := range []string{"https://shop.example.com/", "shop.example.com:443", "%20", "*.example.com"} {
		if code, body, _ := call(t, "GET", h.url+"/api/clusters/open/gateways?host="+host, aliceToken, nil); code != http.StatusBadRequest || !strings.Contains(body, "is not a domain name") {
			t.Errorf("host=%s: %d %s, want 400", host, code, body)
		}
	}
	for _, c := range []struct {
		state protocol.KindState
		want  string
	}{
		{protocol.KindState{Kind: "gateways"}, `No gateway of cluster "open" serves "shop.example.com".`},
		{protocol.KindState{Kind: "gateways", Missing: true, Error: "the server could not find the requested resource"},
			`No gateway of cluster "open" serves "shop.example.com": the cluster doesn't serve Istio's Gateways (networking.istio.io), so Tether has none to look at.`},
		{protocol.KindState{Kind: "gateways", Error: "forbidden"},
			`No gateway of cluster "open" serves "shop.example.com": Tether can't watch the cluster's Gateways: forbidden.`},
		{protocol.KindState{Kind: "gateways", Namespace: "istio-system", Error: "forbidden"},
			`No gateway of cluster "open" serves "shop.example.com" among those Tether can watch: it can't watch the Gateways in namespace "istio-system": forbidden.`},
	} {
		if got := gateways(c.state); got != c.want {
			t.Errorf("%+v:\ngot  %s\nwant %s", c.state, got, c.want)
		}
	}
}

// TestGatewayHiddenFromThePerson: the gateway that serves a host is decided
// over all of them; one in a namespace the person may not list is not
// named, and neither is the one they may list that loses to it: the answer
// is the one for a host no gateway serves.
func TestGatewayHiddenFromThePerson(t *testing.T) {
	fc := fakecluster.New(t)
	answerAccessReviews(t, fc, func(user, resource, namespace string) bool { return namespace == "team-a" })
	h, _ := proxyHub(t, fc, "")
	main, team := res("gateways", "istio-system", "main", true), res("gateways", "team-a", "gw", true)
	main.Hosts, team.Hosts = []string{"*.example.com"}, []string{"shop.example.com"}
	feed(t, h, h.inventory.Receiver("open"), "open", &protocol.Update{Snapshot: true, Complete: true, GatewayTieBreaker: "istio-system/main",
		Kinds: []protocol.KindState{{Kind: "gateways"}}, Upserts: []protocol.Resource{main, team}})
	code, body, _ := call(t, "GET", h.url+"/api/clusters/open/gateways?host=shop.example.com", aliceToken, nil)
	var g web.GatewayJSON
	json.Unmarshal([]byte(body), &g)
	if code != http.StatusNotFound || g.Gateway != "" || len(g.Candidates) != 0 || g.Error != `No gateway of cluster "open" serves "shop.example.com".` {
		t.Errorf("the tie-breaker hidden: %d %s; want 404 naming no gateway", code, body)
	}
}

// TestFleetResourcesNameWhatTheyLeaveOut: a fleet-wide answer is 200 with
// the clusters that could answer, and its trailer names those left out.
func TestFleetResourcesNameWhatTheyLeaveOut(t *testing.T) {
	fc := fakecluster.New(t)
	answerAccessReviews(t, fc, func(user, resource, namespace string) bool { return true })
	h, _ := proxyHub(t, fc, "")
	feed(t, h, h.inventory.Receiver("open"), "open", &protocol.Update{Snapshot: true, Complete: true,
		Kinds: []protocol.KindState{{Kind: "pods"}}, Upserts: []protocol.Resource{res("pods", "shop", "web-1", false)}})
	req, _ := http.NewRequestWithContext(t.Context(), "GET", h.url+"/api/resources?kind=pods", nil)
	req.Header.Set("Authorization", "Bearer "+aliceToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 || !strings.Contains(string(body), `"name":"web-1"`) {
		t.Fatalf("%d %s %v", resp.StatusCode, body, err)
	}
	// alice sees far and open; far has never connected.
	if got := resp.Trailer.Get("Tether-Left-Out"); got != "far (it has sent no inventory yet)" {
		t.Errorf("Tether-Left-Out: %q", got)
	}
}
