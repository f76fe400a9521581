package web

import (
	"net/http/httptest"
	"testing"

	"github.com/tetherhq/tether/internal/inventory/store"
)

// TestCardFacts: the numbers a card shows, as the hub renders them (fleet.js
// mirrors them for live updates).
func TestCardFacts(t *testing.T) {
	n := func(v int) *int { return &v }
	for _, c := range []struct {
		s    *store.Summary
		want fact
	}{
		{nil, absent},
		{&store.Summary{NodesReady: n(3), NodesTotal: n(3)}, fact{Icon: "✔", Text: "3 / 3 ready"}},
		{&store.Summary{NodesReady: n(2), NodesTotal: n(3)}, fact{Icon: "⚠", Text: "2 / 3 ready"}},
		{&store.Summary{NodesReady: n(0), NodesTotal: n(0)}, fact{Icon: "⚠", Text: noNodes}},
	} {
		if got := nodesFact(c.s); got != c.want {
			t.Errorf("nodes of %+v: %+v, want %+v", c.s, got, c.want)
		}
	}
}

// TestStaticFilesAreTheAssetsOnly: /static/ serves the pages' CSS and
// JavaScript, and neither a listing of web/ nor any other file.
func TestStaticFilesAreTheAssetsOnly(t *testing.T) {
	h := StaticFiles()
	for path, want := range map[string]int{
		"/style.css": 200, "/fleet.js": 200, "/cluster.js": 200, "/live.js": 200, "/timeline.js": 200, "/connect.js": 200, "/search.js": 200,
		"/": 404, "/fleet.html": 404, "/cluster.html": 404, "/login.html": 404, "/nothing.js": 404,
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		if rec.Code != want {
			t.Errorf("GET %s: %d, want %d", path, rec.Code, want)
		}
	}
}

// TestSignInReturnsToTheClusterPage: a sign-in goes back to the cluster
// page it was asked on, and nowhere but the hub's own pages.
func TestSignInReturnsToTheClusterPage(t *testing.T) {
	for _, base := range []string{"", "/tether"} {
		h := &Web{cfg: Config{BasePath: base}}
		for next, want := range map[string]string{
			base + "/cluster/shop":             base + "/cluster/shop",
			base + "/cluster/shop/../../x":     base + "/",
			base + "/":                         base + "/",
			"":                                 base + "/",
			"https://evil.example/cluster/x":   base + "/",
			"//evil.example/cluster/x":         base + "/",
			base + "/cluster/..//evil.example": base + "/",
			base + "/cluster/x?y=1":            base + "/",
			"/\\evil.example":                  base + "/",
			base + "/api/kubeconfig":           base + "/",
			base + "/cluster/a%00":             base + "/cluster/a%00",
			base + "/cluster/%5Cevil.example":  base + "/cluster/%5Cevil.example",
		} {
			if got := h.returnTo(next); got != want {
				t.Errorf("base %q, next %q: %q, want %q", base, next, got, want)
			}
		}
	}
}
