package server

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/protocol"
	"github.com/tetherhq/tether/internal/testutil/fakecluster"
)

const reviewsPath = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"

// accessHub is a proxyHub whose cluster "open" answers every access review
// with yes and has one pod in its inventory.
func accessHub(t *testing.T, mods ...func(*Config)) (*testHub, *fakecluster.Cluster) {
	t.Helper()
	fc := fakecluster.New(t)
	answerAccessReviews(t, fc, func(string, string, string) bool { return true })
	h, _ := proxyHub(t, fc, "", mods...)
	feed(t, h, h.inventory.Receiver("open"), "open", &protocol.Update{Snapshot: true, Complete: true,
		Kinds: []protocol.KindState{{Kind: "pods"}}, Upserts: []protocol.Resource{res("pods", "team-a", "web", true)}})
	return h, fc
}

// listPods asks for open's pods as token, and fails the test unless the pod
// is in the answer.
func listPods(t *testing.T, h *testHub, token string) {
	t.Helper()
	code, body, _ := call(t, "GET", h.url+"/api/clusters/open/resources?kind=pods", token, nil)
	if code != 200 || !strings.Contains(body, `"name":"web"`) {
		t.Fatalf("resources: %d %s", code, body)
	}
}

// TestAccessReviewsAreCached: SPEC section 5 asks the cluster, as the
// person, with a SelfSubjectAccessReview cached for 60 s. Two queries by
// one person send one review; another person's query sends their own.
func TestAccessReviewsAreCached(t *testing.T) {
	h, fc := accessHub(t)
	listPods(t, h, aliceToken)
	listPods(t, h, aliceToken)
	if n := fc.Count(reviewsPath); n != 1 {
		t.Errorf("two queries by alice sent %d access reviews, want 1", n)
	}
	listPods(t, h, bobToken)
	if n := fc.Count(reviewsPath); n != 2 {
		t.Errorf("after bob's first query, %d access reviews, want 2 (one each)", n)
	}
}

// TestAccessReviewsExpire: once an answer is older than the cache's
// lifetime, the next query asks the cluster again.
func TestAccessReviewsExpire(t *testing.T) {
	const ttl = 100 * time.Millisecond
	h, fc := accessHub(t, func(c *Config) { c.AccessTTL = ttl })
	listPods(t, h, aliceToken)
	if n := fc.Count(reviewsPath); n != 1 {
		t.Fatalf("the first query sent %d access reviews, want 1", n)
	}
	time.Sleep(2 * ttl)
	listPods(t, h, aliceToken)
	if n := fc.Count(reviewsPath); n != 2 {
		t.Errorf("a query after the cache's lifetime sent %d access reviews in all, want 2", n)
	}
}

// TestResourcesWhenAccessCantBeChecked: with the cluster out of reach, the
// hub can't ask what a person may list, so it shows nothing of the
// inventory it still holds; the cluster's own endpoints say why (503)
// rather than answer with a list that looks whole. The fleet-wide query
// leaves the cluster out, as the fleet page shows it Unreachable.
func TestResourcesWhenAccessCantBeChecked(t *testing.T) {
	h, _ := accessHub(t)
	gw := res("gateways", "istio-system", "public", true)
	gw.Hosts = []string{"shop.example.com"}
	feed(t, h, h.inventory.Receiver("open"), "open", &protocol.Update{Snapshot: true, Complete: true,
		Kinds: []protocol.KindState{{Kind: "pods"}, {Kind: "gateways"}}, Upserts: []protocol.Resource{res("pods", "team-a", "web", true), gw}})
	h.agents["open"].Stop(t)
	eventually(t, 5*time.Second, "open's agent gone", func() bool { return h.connected("open") == nil })
	for _, path := range []string{"/api/clusters/open/resources?kind=pods", "/api/clusters/open/gateways?host=shop.example.com"} {
		code, body, _ := call(t, "GET", h.url+path, aliceToken, nil)
		if code != http.StatusServiceUnavailable || !strings.Contains(strings.ReplaceAll(body, `\"`, `"`), `can't ask cluster "open" what you may list`) {
			t.Errorf("%s: %d %s; want 503 saying the cluster can't be asked", path, code, body)
		}
	}
	if code, body, _ := call(t, "GET", h.url+"/api/resources?kind=pods", aliceToken, nil); code != 200 || strings.TrimSpace(body) != "[]" {
		t.Errorf("fleet-wide: %d %s; want 200 without open's pod", code, body)
	}
}

// TestAccessAskedOnceOfASlowCluster: when the cluster doesn't answer access
// reviews in time, the hub can only answer 503; it must not wait a whole
// review timeout again for every namespace that has matches.
func TestAccessAskedOnceOfASlowCluster(t *testing.T) {
	const timeout = 100 * time.Millisecond
	fc := fakecluster.New(t)
	answerAccessReviews(t, fc, func(string, string, string) bool {
		time.Sleep(3 * timeout) // longer than the hub waits
		return true
	})
	h, _ := proxyHub(t, fc, "", func(c *Config) { c.ProbeTimeout = timeout })
	var pods []protocol.Resource
	for i := range 20 {
		pods = append(pods, res("pods", fmt.Sprintf("team-%d", i), "web", true))
	}
	feed(t, h, h.inventory.Receiver("open"), "open", &protocol.Update{Snapshot: true, Complete: true,
		Kinds: []protocol.KindState{{Kind: "pods"}}, Upserts: pods})
	code, body, _ := call(t, "GET", h.url+"/api/clusters/open/resources?kind=pods", aliceToken, nil)
	if code != http.StatusServiceUnavailable {
		t.Fatalf("%d %s, want 503", code, body)
	}
	// Each review waits its timeout: their count is the time taken.
	if n := fc.Count(reviewsPath); n > 2 {
		t.Errorf("%d access reviews sent for 20 namespaces, each waiting %s; one failed review already decides it (503)", n, timeout)
	}
}

// TestClusterScopedKindIsAskedAboutClusterWide: a cluster-scoped kind that
// an agent sent with a namespace (none does) is shown only to someone who
// may list it cluster-wide, never on a review in that namespace, where a
// RoleBinding could allow it.
func TestClusterScopedKindIsAskedAboutClusterWide(t *testing.T) {
	fc := fakecluster.New(t)
	var namespaced atomic.Int32
	answerAccessReviews(t, fc, func(_, _, namespace string) bool {
		if namespace != "" {
			namespaced.Add(1)
			return true
		}
		return false
	})
	h, _ := proxyHub(t, fc, "")
	feed(t, h, h.inventory.Receiver("open"), "open", &protocol.Update{Snapshot: true, Complete: true,
		Kinds: []protocol.KindState{{Kind: "nodes"}}, Upserts: []protocol.Resource{res("nodes", "team-a", "n1", true)}})
	code, body, _ := call(t, "GET", h.url+"/api/clusters/open/resources?kind=nodes", aliceToken, nil)
	if code != http.StatusOK || strings.Contains(body, "n1") {
		t.Errorf("nodes for someone who may list them nowhere cluster-wide: %d %s; want 200 without n1", code, body)
	}
	if n := namespaced.Load(); n > 0 {
		t.Errorf("%d reviews asked about nodes in a namespace", n)
	}
}
