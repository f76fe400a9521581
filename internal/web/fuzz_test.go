package web

import (
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// FuzzParseQuery: any query string on the resources API gives a query of a
// known kind, or an error on one line for the person who wrote it; a label
// selector accepted is one that matches consistently.
func FuzzParseQuery(f *testing.F) {
	for _, s := range []string{
		"kind=pods", "kind=pods&namespace=a&labelSelector=app%3Dx,tier!%3Dweb&ready=false", "kind=nope", "",
		"kind=pods&labelSelector=a+in+(x,y),!b", "kind=pods&labelSelector=%3D%3D%3D", "kind=pods&ready=TRUE",
		"kind=pods&labelSelector=" + strings.Repeat("a", 300) + "%3Db", "kind=pods&kind=nodes", "%zz", "kind=pods&namespace=Not_A_Name",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, rawQuery string) {
		r := httptest.NewRequest("GET", "/api/resources", nil)
		r.URL.RawQuery = rawQuery
		q, err := parseQuery(r, nil)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error on more than one line: %q", err)
			}
			return
		}
		if q.Kind == "" {
			t.Fatalf("accepted %q without a kind", rawQuery)
		}
		if q.Namespace != "" && len(validation.IsDNS1123Label(q.Namespace)) > 0 {
			t.Fatalf("accepted namespace %q, which no namespace can be named", q.Namespace)
		}
		if q.Selector != nil {
			// What the selector prints parses back to the same selector.
			again, err := labels.Parse(q.Selector.String())
			if err != nil || again.String() != q.Selector.String() {
				t.Fatalf("selector %q prints as %q, which parses to %v, %v", rawQuery, q.Selector, again, err)
			}
		}
	})
}

// FuzzReturnTo: whatever the sign-in form's next says, the browser is sent
// to the fleet page or a cluster's page under the hub's base path, and
// never to another site: no scheme, no host, no // or \ that a browser
// would take for one.
func FuzzReturnTo(f *testing.F) {
	for _, s := range []string{"/cluster/shop", "//evil.example/cluster/x", "/\\evil.example", "https://evil.example/", "/cluster/../x", "/cluster/%2F%2Fevil", ""} {
		f.Add("", s)
		f.Add("/tether", "/tether"+s)
	}
	f.Fuzz(func(t *testing.T, base, next string) {
		if !ValidBasePath(base) {
			return
		}
		h := &Web{cfg: Config{BasePath: base}}
		pageBase := h.pageBase()
		got := h.returnTo(next)
		if got != pageBase && !strings.HasPrefix(got, pageBase+"cluster/") {
			t.Fatalf("next %q sends the browser to %q, outside %q", next, got, pageBase)
		}
		u, err := url.Parse(got)
		if err != nil || u.Scheme != "" || u.Host != "" || strings.HasPrefix(got, "//") || strings.ContainsAny(got, "\\\r\n") {
			t.Fatalf("next %q sends the browser to %q, which names a site", next, got)
		}
	})
}
