package server

import (
	"net/http"
	"strings"
	"testing"

	"github.com/tetherhq/tether/internal/testutil/fakecluster"
)

// TestCookiesOverHTTPSTakeAPrefix: a hub people open at https names its
// session cookie so that browsers take it only from an https answer of
// this host (__Host-, Path=/, no Domain), or under a base path, which
// shares the host, only from an https answer (__Secure-); and it reads
// only that name, so a cookie of the plain name, which a sibling host or
// someone on the network could plant, signs nobody in.
func TestCookiesOverHTTPSTakeAPrefix(t *testing.T) {
	for _, tc := range []struct{ base, name, path string }{
		{"", "__Host-tether_session", "/"},
		{"/tether/", "__Secure-tether_session", "/tether/"},
	} {
		h, _ := proxyHub(t, fakecluster.New(t), "", func(c *Config) { c.BasePath = tc.base })
		base := h.url + strings.TrimSuffix(tc.base, "/")
		origin := http.Header{"Origin": {"https://hub.example.com"}}
		req, _ := http.NewRequest("POST", base+"/login", strings.NewReader("token="+aliceToken))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", "https://hub.example.com")
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		var session *http.Cookie
		for _, c := range resp.Cookies() {
			if c.Name == tc.name {
				session = c
			} else {
				t.Errorf("base %q: sign-in set cookie %q", tc.base, c.Name)
			}
		}
		if session == nil || !session.Secure || session.Path != tc.path || session.Domain != "" || !session.HttpOnly {
			t.Fatalf("base %q: sign-in set %v; want %s, Secure, HttpOnly, Path=%s, no Domain", tc.base, resp.Header["Set-Cookie"], tc.name, tc.path)
		}
		with := func(name string) http.Header {
			return http.Header{"Origin": origin["Origin"], "Cookie": {name + "=" + session.Value}}
		}
		if code, body, _ := call(t, "GET", base+"/api/clusters", "", with(tc.name)); code != http.StatusOK {
			t.Errorf("base %q: /api/clusters with %s: %d %.100s", tc.base, tc.name, code, body)
		}
		if code, _, _ := call(t, "GET", base+"/api/clusters", "", with("tether_session")); code != http.StatusUnauthorized {
			t.Errorf("base %q: /api/clusters with the plain name: %d, want 401", tc.base, code)
		}
		_, _, hdr := call(t, "POST", base+"/logout", "", with(tc.name))
		if cleared := strings.Join(hdr["Set-Cookie"], "\n"); !strings.Contains(cleared, tc.name+"=;") || !strings.Contains(cleared, "Max-Age=0") {
			t.Errorf("base %q: sign-out set %q; want %s cleared", tc.base, cleared, tc.name)
		}
	}
}
