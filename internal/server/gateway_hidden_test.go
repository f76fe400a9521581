package server

import (
	"net/http"
	"strings"
	"testing"

	"github.com/tetherhq/tether/internal/protocol"
	"github.com/tetherhq/tether/internal/testutil/fakecluster"
)

// TestHiddenGatewaysAnswerAsNone: to a person who may list no Gateway, a
// host served only by gateways they may not list is answered byte for
// byte as a host no gateway serves. The answer said "no gateway that you
// may list serves", telling them hidden ones exist, and named the
// tie-breaker (issue 33). Nor does /api/clusters/<name> name the
// tie-breaker to them.
func TestHiddenGatewaysAnswerAsNone(t *testing.T) {
	fc := fakecluster.New(t)
	answerAccessReviews(t, fc, func(user, resource, namespace string) bool {
		return user == "bob" || resource != "gateways" || namespace == "team-a"
	})
	h, _ := proxyHub(t, fc, "")
	gw := func(ns, name string, hosts ...string) protocol.Resource {
		r := res("gateways", ns, name, true)
		r.Hosts = hosts
		return r
	}
	other := gw("istio-system", "other", "other.example.org")
	answer := func(tieBreaker, host string, gws ...protocol.Resource) (int, string) {
		t.Helper()
		feed(t, h, h.inventory.Receiver("open"), "open", &protocol.Update{Snapshot: true, Complete: true, GatewayTieBreaker: tieBreaker,
			Kinds: []protocol.KindState{{Kind: "gateways"}}, Upserts: append([]protocol.Resource{other}, gws...)})
		code, body, header := call(t, "GET", h.url+"/api/clusters/open/gateways?host="+host, aliceToken, nil)
		return code, header.Get("Content-Type") + "\n" + body
	}
	noneCode, none := answer("", "shop.example.com")
	if noneCode != http.StatusNotFound {
		t.Fatalf("no gateway: %d %s", noneCode, none)
	}
	for _, c := range []struct {
		what       string
		tieBreaker string
		gws        []protocol.Resource
	}{
		{"one hidden gateway", "", []protocol.Resource{gw("istio-system", "main", "*.example.com")}},
		{"two hidden, no tie-breaker", "", []protocol.Resource{gw("istio-system", "main", "*.example.com"), gw("shop", "shop", "shop.example.com")}},
		{"two hidden, the tie-breaker one of them", "istio-system/main", []protocol.Resource{gw("istio-system", "main", "*.example.com"), gw("shop", "shop", "shop.example.com")}},
		{"two hidden, the tie-breaker neither", "istio-system/other", []protocol.Resource{gw("istio-system", "main", "*.example.com"), gw("shop", "shop", "shop.example.com")}},
	} {
		if code, got := answer(c.tieBreaker, "shop.example.com", c.gws...); code != noneCode || got != none {
			t.Errorf("%s: %d\n%s\nwant, as for none:\n%d\n%s", c.what, code, got, noneCode, none)
		}
		if _, body, _ := call(t, "GET", h.url+"/api/clusters/open", aliceToken, nil); strings.Contains(body, "gatewayTieBreaker") {
			t.Errorf("%s: /api/clusters/open names the tie-breaker to alice: %s", c.what, body)
		}
	}
	// The tie-breaker is named to those who may list it, and only them.
	if _, body, _ := call(t, "GET", h.url+"/api/clusters/open", bobToken, nil); !strings.Contains(body, `"gatewayTieBreaker":"istio-system/other"`) {
		t.Errorf("/api/clusters/open to bob, who may list gateways: %s; want the tie-breaker", body)
	}
	// Where alice may list some, the ambiguity is hers to see, but not
	// the name of a tie-breaker she may not list.
	code, body := answer("istio-system/other", "shop.example.com", gw("team-a", "a", "*.example.com"), gw("team-a", "b", "shop.example.com"))
	if code != http.StatusConflict || !strings.Contains(body, "team-a/a, team-a/b") || strings.Contains(body, "istio-system") {
		t.Errorf("two she may list, the tie-breaker hidden: %d %s; want 409 naming them and no other", code, body)
	}
}
