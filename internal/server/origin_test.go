package server

import (
	"net/http"
	"strings"
	"testing"

	"github.com/tetherhq/tether/internal/testutil/fakecluster"
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
	fc := fakecluster.New(t)
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

// TestRequestsWithoutFetchMetadata pins decision 026: on /clusters/, a
// request the auth proxy signs in that says it is a browser but carries no
// Sec-Fetch-Site (a browser from before Fetch Metadata, or on plain HTTP)
// is refused, as its <img> from another site's page would carry the
// proxy's cookie and neither Origin nor Fetch Metadata. kubectl, client-go
// and curl send no Fetch Metadata either, and go through; so do current
// browsers, and anyone with a bearer token, which no browser sends on its
// own.
func TestRequestsWithoutFetchMetadata(t *testing.T) {
	fc := fakecluster.New(t)
	h, _ := proxyHub(t, fc, "")
	const (
		safari15 = "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/15.6 Safari/605.1.15"
		chrome   = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36"
	)
	for _, tc := range []struct {
		name string
		head http.Header
		want int
	}{
		{"an old browser's <img>", http.Header{"X-Remote-User": {"carol"}, "User-Agent": {safari15}, "Accept": {"image/webp,image/png,*/*;q=0.8"}}, http.StatusForbidden},
		{"an old browser's link", http.Header{"X-Remote-User": {"carol"}, "User-Agent": {safari15}, "Accept": {"text/html"}}, http.StatusForbidden},
		{"a current browser, same origin", http.Header{"X-Remote-User": {"carol"}, "User-Agent": {chrome}, "Sec-Fetch-Site": {"same-origin"}}, http.StatusOK},
		{"a current browser, typed", http.Header{"X-Remote-User": {"carol"}, "User-Agent": {chrome}, "Sec-Fetch-Site": {"none"}}, http.StatusOK},
		{"a current browser's <img>", http.Header{"X-Remote-User": {"carol"}, "User-Agent": {chrome}, "Sec-Fetch-Site": {"cross-site"}}, http.StatusForbidden},
		{"kubectl through the proxy", http.Header{"X-Remote-User": {"carol"}, "User-Agent": {"kubectl/v1.32.0 (linux/amd64) kubernetes/70d3cc9"}}, http.StatusOK},
		{"client-go through the proxy", http.Header{"X-Remote-User": {"carol"}, "User-Agent": {"Go-http-client/1.1"}}, http.StatusOK},
		{"curl through the proxy", http.Header{"X-Remote-User": {"carol"}, "User-Agent": {"curl/8.5.0"}}, http.StatusOK},
		{"an old browser with a bearer token", http.Header{"Authorization": {"Bearer " + aliceToken}, "User-Agent": {safari15}}, http.StatusOK},
	} {
		code, body, _ := call(t, "GET", h.url+"/clusters/open/api", "", tc.head)
		if code != tc.want {
			t.Errorf("%s: %d %.200s, want %d", tc.name, code, body, tc.want)
		}
	}
}
