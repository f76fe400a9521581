package server

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/protocol"
	"github.com/tetherhq/tether/internal/testutil/fakecluster"
	"github.com/tetherhq/tether/internal/web"
)

// wideInventory feeds cluster an inventory of one pod in each of n
// namespaces ns-00000…, as a hostile agent may send, plus one pod named
// web in apps, which sorts before them: the namespaces asked about first.
func wideInventory(t *testing.T, h *testHub, cluster string, n int) {
	t.Helper()
	rcv := h.inventory.Receiver(cluster)
	pods := []protocol.Resource{res("pods", "apps", "web", true)}
	for i := range n {
		pods = append(pods, res("pods", fmt.Sprintf("ns-%05d", i), "p", true))
	}
	for len(pods) > 0 {
		chunk := pods[:min(len(pods), protocol.MaxUpdateItems)]
		pods = pods[len(chunk):]
		u := &protocol.Update{Upserts: chunk, Complete: len(pods) == 0}
		if chunk[0].Name == "web" {
			u.Snapshot, u.Kinds = true, []protocol.KindState{{Kind: "pods"}}
		}
		feed(t, h, rcv, cluster, u)
	}
}

// reviewCounter makes fc answer access reviews as may does, and counts
// them by cluster-wide and in a namespace.
type reviewCounter struct{ wide, namespaced atomic.Int64 }

func countReviews(t *testing.T, fc *fakecluster.Cluster, may func(user, resource, namespace string) bool) *reviewCounter {
	c := &reviewCounter{}
	answerAccessReviews(t, fc, func(user, resource, namespace string) bool {
		if namespace == "" {
			c.wide.Add(1)
		} else {
			c.namespaced.Add(1)
		}
		return may(user, resource, namespace)
	})
	return c
}

func (c *reviewCounter) total() int64 { return c.wide.Load() + c.namespaced.Load() }

// getWithTrailers sends a GET as token and returns the status, body and header with
// trailers.
func getWithTrailers(t *testing.T, url, token string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range resp.Trailer {
		resp.Header[k] = v
	}
	return resp.StatusCode, string(body), resp.Header
}

// TestAccessReviewsOfAWideInventoryAreBounded: an agent reporting 20,000
// namespaces made one query send 20,001 access reviews (issue 33). A
// person who may list pods everywhere costs one review; one who may list
// them in some namespaces only costs at most the query's bound, gets what
// was checked, and the answer's Tether-Left-Out says what is missing and
// why, in the cluster's answer and in the fleet-wide one.
func TestAccessReviewsOfAWideInventoryAreBounded(t *testing.T) {
	const namespaces = 20_000
	fc := fakecluster.New(t)
	reviews := countReviews(t, fc, func(user, _, namespace string) bool {
		return user == "bob" || namespace == "apps"
	})
	h, _ := proxyHub(t, fc, "")
	wideInventory(t, h, "open", namespaces)

	code, body, header := getWithTrailers(t, h.url+"/api/clusters/open/resources?kind=pods", bobToken)
	if code != 200 || strings.Count(body, `"name":"p"`) != namespaces {
		t.Fatalf("bob, who may list pods everywhere: %d, %d pods", code, strings.Count(body, `"name":"p"`))
	}
	if n := reviews.total(); n != 1 || header.Get("Tether-Left-Out") != "" {
		t.Errorf("bob, who may list pods everywhere: %d access reviews, Tether-Left-Out %q; want 1 and none", n, header.Get("Tether-Left-Out"))
	}

	start := time.Now()
	code, body, header = getWithTrailers(t, h.url+"/api/clusters/open/resources?kind=pods", aliceToken)
	took := time.Since(start)
	n := reviews.total() - 1
	t.Logf("alice's query of %d namespaces: %d access reviews (%d in namespaces), %s", namespaces, n, reviews.namespaced.Load(), took)
	if code != 200 || !strings.Contains(body, `"namespace":"apps"`) || strings.Contains(body, `"name":"p"`) {
		t.Errorf("alice: %d %.200s; want 200 with apps' pod only", code, body)
	}
	if max := int64(1 + web.DefaultReviewsPerQuery); n > max {
		t.Errorf("alice's query sent %d access reviews, want at most %d", n, max)
	}
	left := header.Get("Tether-Left-Out")
	if want := fmt.Sprintf("open (%d namespaces with matches", namespaces+1-web.DefaultReviewsPerQuery); !strings.HasPrefix(left, want) {
		t.Errorf("Tether-Left-Out: %q, want it to start %q", left, want)
	}

	// The fleet-wide query answers, with what it could check, and names
	// what it left out.
	before := reviews.total()
	code, body, header = getWithTrailers(t, h.url+"/api/resources?kind=pods", aliceToken)
	if code != 200 || !strings.Contains(body, `"namespace":"apps"`) {
		t.Errorf("fleet-wide: %d %.200s", code, body)
	}
	if n := reviews.total() - before; n > int64(1+web.DefaultReviewsPerQuery) {
		t.Errorf("the fleet-wide query sent %d access reviews, want at most %d", n, 1+web.DefaultReviewsPerQuery)
	}
	if left := header.Get("Tether-Left-Out"); !strings.Contains(left, "open (") || !strings.Contains(left, "namespaces with matches") {
		t.Errorf("fleet-wide Tether-Left-Out: %q, want open's namespaces named", left)
	}
}

// TestAccessReviewsPerPersonAreBounded: each query asks about at most
// AccessReviewsPerQuery namespaces, and a person's queries send at most
// AccessReviewsPerPerson reviews to a cluster each AccessTTL; past either,
// namespaces are left out, and Tether-Left-Out says which bound left them.
func TestAccessReviewsPerPersonAreBounded(t *testing.T) {
	fc := fakecluster.New(t)
	reviews := countReviews(t, fc, func(_, _, namespace string) bool { return namespace != "" })
	h, _ := proxyHub(t, fc, "", func(c *Config) { c.AccessReviewsPerQuery, c.AccessReviewsPerPerson = 3, 5 })
	wideInventory(t, h, "open", 9) // apps and 9 more: 10 namespaces
	for i, want := range []struct {
		reviews int64
		pods    int
		left    string
	}{
		{4, 3, "open (7 namespaces with matches left out, unchecked: one query sends at most 3 access reviews in namespaces"},
		{5, 4, "open (6 namespaces with matches left out, unchecked: a person may have 5 access reviews of one cluster every 1m0s"},
		{5, 4, "open (6 namespaces with matches left out, unchecked: a person may have 5 access reviews of one cluster every 1m0s"},
	} {
		code, body, header := getWithTrailers(t, h.url+"/api/clusters/open/resources?kind=pods", aliceToken)
		if n := strings.Count(body, `"name":`); code != 200 || n != want.pods {
			t.Errorf("query %d: %d, %d pods; want 200, %d", i+1, code, n, want.pods)
		}
		if n := reviews.total(); n != want.reviews {
			t.Errorf("after query %d: %d access reviews, want %d", i+1, n, want.reviews)
		}
		if got := header.Get("Tether-Left-Out"); !strings.HasPrefix(got, want.left) {
			t.Errorf("query %d: Tether-Left-Out %q, want it to start %q", i+1, got, want.left)
		}
	}
	// Another person has a share of their own.
	if code, body, _ := getWithTrailers(t, h.url+"/api/clusters/open/resources?kind=pods", bobToken); code != 200 || strings.Count(body, `"name":`) != 3 {
		t.Errorf("bob: %d %s; want his own 3 namespaces' pods", code, body)
	}
}

// TestAClusterCantEvictAnothersAccessAnswers: the answers were one cache of
// 100,000 for all clusters, started over when full, so queries of one
// cluster's 20,000 namespaces wiped what every other cluster had answered.
func TestAClusterCantEvictAnothersAccessAnswers(t *testing.T) {
	fc := fakecluster.New(t)
	var alices atomic.Int64
	answerAccessReviews(t, fc, func(user, _, namespace string) bool {
		if user == "alice" {
			alices.Add(1)
			return true
		}
		return namespace == "apps"
	})
	h, _ := proxyHub(t, fc, "")
	feed(t, h, h.inventory.Receiver("open"), "open", &protocol.Update{Snapshot: true, Complete: true,
		Kinds: []protocol.KindState{{Kind: "pods"}}, Upserts: []protocol.Resource{res("pods", "team-a", "web", true)}})
	wideInventory(t, h, "ops", 20_000) // the ops group's cluster; alice's is open
	listPods(t, h, aliceToken)
	// Six people of ops, each asking of all 20,000 namespaces once, as
	// the auth proxy names them.
	for i := range 6 {
		who := http.Header{"X-Remote-User": {fmt.Sprintf("op-%d", i)}, "X-Remote-Group": {"ops"}}
		if code, body, _ := call(t, "GET", h.url+"/api/clusters/ops/resources?kind=pods", "", who); code != 200 {
			t.Fatalf("%s's query of ops: %d %.200s", who.Get("X-Remote-User"), code, body)
		}
	}
	listPods(t, h, aliceToken)
	if n := alices.Load(); n != 1 {
		t.Errorf("alice's two queries of open, with those of ops between, sent %d access reviews; want 1, the second answered from the cache", n)
	}
}

// TestAccessAnswersEndWithTheirConnection: the cluster's answers came
// through its agent's connection, and an impostor with the agent's token
// could answer "allowed" to everything; what it answered must not outlive
// it. Another agent taking over, or the agent connecting again, starts
// over.
func TestAccessAnswersEndWithTheirConnection(t *testing.T) {
	h, fc := accessHub(t)
	listPods(t, h, aliceToken)
	listPods(t, h, aliceToken)
	if n := fc.Count(reviewsPath); n != 1 {
		t.Fatalf("two queries sent %d access reviews, want 1", n)
	}
	first := h.connected("open")
	second := startAgent(t, h.url, "open", fc)
	eventually(t, 5*time.Second, "the second agent takes over", func() bool { c := h.connected("open"); return c != nil && c != first })
	listPods(t, h, aliceToken)
	if n := fc.Count(reviewsPath); n != 2 {
		t.Errorf("after a takeover, %d access reviews in all, want 2: the first connection's answer dropped", n)
	}
	taker := h.connected("open")
	second.Stop(t)
	eventually(t, 5*time.Second, "the second agent is gone", func() bool { return h.connected("open") == nil })
	third := startAgent(t, h.url, "open", fc)
	eventually(t, 5*time.Second, "the agent connects again", third.Connected)
	if h.connected("open") == taker {
		t.Fatal("the same connection")
	}
	listPods(t, h, aliceToken)
	if n := fc.Count(reviewsPath); n != 3 {
		t.Errorf("after the agent connected again, %d access reviews in all, want 3", n)
	}
}

// TestFleetQueryBoundedAcrossClusters: the bound on reviews in namespaces
// is the whole query's, whatever the clusters it covers; the answer is 200
// with what was checked, and its trailer names each cluster left out, or
// part left out, and why.
func TestFleetQueryBoundedAcrossClusters(t *testing.T) {
	fc := fakecluster.New(t)
	reviews := countReviews(t, fc, func(_, _, namespace string) bool { return namespace != "" })
	h, _ := proxyHub(t, fc, "", func(c *Config) { c.AccessReviewsPerQuery = 4 })
	wideInventory(t, h, "open", 2) // apps, ns-00000, ns-00001
	wideInventory(t, h, "ops", 2)
	carol := http.Header{"X-Remote-User": {"carol"}, "X-Remote-Group": {"ops"}} // sees open, ops and far
	req, err := http.NewRequestWithContext(t.Context(), "GET", h.url+"/api/resources?kind=pods", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header = carol
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %s %v", resp.StatusCode, body, err)
	}
	if n, ns := strings.Count(string(body), `"name":`), reviews.namespaced.Load(); n != 4 || ns != 4 || reviews.wide.Load() != 2 {
		t.Errorf("%d pods, %d reviews in namespaces, %d of every namespace; want 4, 4 and 2 (one per cluster)", n, ns, reviews.wide.Load())
	}
	// Which cluster's namespaces are left out depends on which is asked
	// first: the two are asked at once.
	left := resp.Trailer.Get("Tether-Left-Out")
	if !strings.HasPrefix(left, "far (it has sent no inventory yet); ") || strings.Count(left, "with matches left out, unchecked: one query sends at most 4 access reviews in namespaces") == 0 {
		t.Errorf("Tether-Left-Out: %q", left)
	}
	leftOut := 0
	for _, part := range strings.Split(left, "; ")[1:] {
		var cluster string
		var n int
		if _, err := fmt.Sscanf(part, "%s (%d namespace", &cluster, &n); err != nil {
			t.Errorf("%q: %v", part, err)
		}
		leftOut += n
	}
	if leftOut != 2 {
		t.Errorf("Tether-Left-Out names %d namespaces left out, want 2: %q", leftOut, left)
	}
}
