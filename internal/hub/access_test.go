package hub

import (
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/protocol"
)

const reviewsPath = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"

// accessHub is a proxyHub whose cluster "open" answers every access review
// with yes and has one pod in its inventory.
func accessHub(t *testing.T, mods ...func(*Config)) (*testHub, *fakeCluster) {
	t.Helper()
	fc := newFakeCluster(t)
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
	if h.cfg.AccessTTL != 60*time.Second {
		t.Fatalf("AccessTTL = %s, want SPEC's 60 s", h.cfg.AccessTTL)
	}
	listPods(t, h, aliceToken)
	listPods(t, h, aliceToken)
	if n := fc.count(reviewsPath); n != 1 {
		t.Errorf("two queries by alice sent %d access reviews, want 1", n)
	}
	listPods(t, h, bobToken)
	if n := fc.count(reviewsPath); n != 2 {
		t.Errorf("after bob's first query, %d access reviews, want 2 (one each)", n)
	}
}

// TestAccessReviewsExpire: once an answer is older than the cache's
// lifetime, the next query asks the cluster again.
func TestAccessReviewsExpire(t *testing.T) {
	const ttl = 100 * time.Millisecond
	h, fc := accessHub(t, func(c *Config) { c.AccessTTL = ttl })
	listPods(t, h, aliceToken)
	if n := fc.count(reviewsPath); n != 1 {
		t.Fatalf("the first query sent %d access reviews, want 1", n)
	}
	time.Sleep(2 * ttl)
	listPods(t, h, aliceToken)
	if n := fc.count(reviewsPath); n != 2 {
		t.Errorf("a query after the cache's lifetime sent %d access reviews in all, want 2", n)
	}
}
