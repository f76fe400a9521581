package hub

import (
	"net/http"
	"strings"
	"testing"
)

// TestProxiedPagesDontActAsTheHub: through a service proxy, what a pod
// serves comes from the hub's own address, where the person's browser
// holds the hub's session and the auth proxy's cookie. A link to it,
// opened by someone the auth proxy signs in, ran the pod's script as the
// hub's own page (it could take their kubeconfig, or call any cluster as
// them), and its Set-Cookie planted a session of the pod's choosing. The
// hub passes no cookies on, nor a Clear-Site-Data, and has the browser
// treat the answer as from nowhere (CSP sandbox), as kubectl never notices.
func TestProxiedPagesDontActAsTheHub(t *testing.T) {
	fc := newFakeCluster(t)
	h, _ := proxyHub(t, fc, "")
	for _, who := range []http.Header{{"X-Remote-User": {"carol"}}, {"Authorization": {"Bearer " + aliceToken}}} {
		code, body, answer := call(t, "GET", h.url+"/clusters/open/page", "", who)
		if code != http.StatusOK || !strings.Contains(body, "<script>") {
			t.Fatalf("%v: %d %s", who, code, body)
		}
		if got := answer.Values("Set-Cookie"); len(got) > 0 {
			t.Errorf("%v: the pod's Set-Cookie reached the browser: %q", who, got)
		}
		if got := answer.Get("Clear-Site-Data"); got != "" {
			t.Errorf("%v: the pod's Clear-Site-Data reached the browser: %q", who, got)
		}
		if csp := answer.Values("Content-Security-Policy"); len(csp) != 1 || strings.TrimSpace(csp[0]) != "sandbox" {
			t.Errorf("%v: Content-Security-Policy %q, want sandbox", who, csp)
		}
	}
	// The hub's own answers to /clusters/ are its own: a Status.
	if code, _, answer := call(t, "GET", h.url+"/clusters/nowhere/page", aliceToken, nil); code != http.StatusNotFound || answer.Get("Content-Type") != "application/json" {
		t.Errorf("a missing cluster: %d, Content-Type %q", code, answer.Get("Content-Type"))
	}
}
