package web

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// TestParseQuerySaysWhatIsWrong: each mistake in a resources query gets an
// error that names it; a well-formed query passes.
func TestParseQuerySaysWhatIsWrong(t *testing.T) {
	for _, c := range []struct{ query, want string }{
		{"", "kind is required"},
		{"kind=nope", `kind "nope" is not one Tether keeps`},
		{"kind=pods&namespace=Shop_Prod", `namespace "Shop_Prod" is not a Kubernetes namespace name`},
		{"kind=pods&namespace=" + strings.Repeat("a", 64), "is not a Kubernetes namespace name"},
		{"kind=pods&labelSelector=%3D%3D", "is not a Kubernetes label selector"},
		{"kind=pods&ready=yes", `ready must be true or false, not "yes"`},
		{"kind=pods&namespace=shop-prod&labelSelector=app%3Dweb&ready=true", ""},
		{"kind=nodes", ""},
	} {
		r := httptest.NewRequest("GET", "/api/resources?"+c.query, nil)
		_, err := parseQuery(r, nil)
		if c.want == "" {
			if err != nil {
				t.Errorf("%q: %v", c.query, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want one saying %q", c.query, err, c.want)
		}
	}
}
