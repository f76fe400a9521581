package auth

import (
	"net/http/httptest"
	"testing"
)

// TestSameOriginWithADefaultPort: a public URL that names its scheme's
// default port is the same origin as the one browsers send, which leaves
// the port out; any other port, scheme or host is another site.
func TestSameOriginWithADefaultPort(t *testing.T) {
	for _, tc := range []struct {
		public, origin string
		same           bool
	}{
		{"https://hub.example.com:443/tether", "https://hub.example.com", true},
		{"https://hub.example.com", "https://hub.example.com", true},
		{"https://HUB.example.com", "https://hub.example.com", true},
		{"http://hub.example.com:80", "http://hub.example.com", true},
		{"https://[fd00::1]:443", "https://[fd00::1]", true},
		{"https://hub.example.com:8443", "https://hub.example.com:8443", true},
		{"https://hub.example.com:8443", "https://hub.example.com", false},
		{"https://hub.example.com:443", "http://hub.example.com", false},
		{"http://hub.example.com:443", "http://hub.example.com", false},
		{"https://hub.example.com", "https://hub.example.com.evil.example", false},
		{"https://hub.example.com", "", true}, // no Origin: not a browser's cross-site request
	} {
		r := httptest.NewRequest("POST", "/login", nil)
		if tc.origin != "" {
			r.Header.Set("Origin", tc.origin)
		}
		if got := SameOrigin(r, tc.public); got != tc.same {
			t.Errorf("public URL %s, Origin %q: same origin %v, want %v", tc.public, tc.origin, got, tc.same)
		}
	}
}

// TestFromOtherSite: Fetch Metadata refuses what Origin leaves out, a
// plain GET from another site's page or a sibling host's, which carries
// the cookies; a top-level GET is let through where navigations are, and a
// request without Fetch Metadata is judged by its Origin alone.
func TestFromOtherSite(t *testing.T) {
	for _, tc := range []struct {
		method, origin, site, mode, dest string
		navigationsOK                    bool
		other                            bool
	}{
		{"GET", "", "", "", "", false, false}, // kubectl, curl
		{"GET", "", "same-origin", "cors", "empty", false, false},
		{"GET", "", "none", "navigate", "document", false, false}, // typed or bookmarked
		{"GET", "", "cross-site", "no-cors", "image", true, true},
		{"GET", "", "same-site", "no-cors", "script", true, true},
		{"GET", "", "cross-site", "navigate", "document", true, false},
		{"GET", "", "cross-site", "navigate", "document", false, true},
		{"GET", "", "same-site", "navigate", "document", true, false},
		{"GET", "", "cross-site", "navigate", "iframe", true, true},
		{"POST", "", "cross-site", "navigate", "document", true, true},
		{"GET", "https://evil.example", "", "", "", true, true},
		{"GET", "https://evil.example", "cross-site", "navigate", "document", true, true},
		{"GET", "https://hub.example.com", "same-origin", "cors", "empty", false, false},
	} {
		r := httptest.NewRequest(tc.method, "/api/clusters", nil)
		for k, v := range map[string]string{"Origin": tc.origin, "Sec-Fetch-Site": tc.site, "Sec-Fetch-Mode": tc.mode, "Sec-Fetch-Dest": tc.dest} {
			if v != "" {
				r.Header.Set(k, v)
			}
		}
		if got := FromOtherSite(r, "https://hub.example.com", tc.navigationsOK); got != tc.other {
			t.Errorf("%+v: from another site %v, want %v", tc, got, tc.other)
		}
	}
}
