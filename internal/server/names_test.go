package server

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/testutil/fakecluster"
)

// TestNamesThatReadAsOthersAreRefused: a name or group from the auth proxy
// with an invisible (zero-width, bidi) or control character, or a
// fullwidth colon, reads as another in a log line ("\u200bsystem:admin").
// Every endpoint answers 403 saying why, and no cluster is asked
// (issue 33; SPEC section 3).
func TestNamesThatReadAsOthersAreRefused(t *testing.T) {
	fc := fakecluster.New(t)
	h, audit := proxyHub(t, fc, "")
	before := fc.Count("/api")
	for _, who := range []http.Header{
		{"X-Remote-User": {"\u200bsystem:admin"}},
		{"X-Remote-User": {"carol"}, "X-Remote-Group": {"dev,system\uff1amasters"}},
		{"X-Remote-User": {"carol\u202e"}},
		{"X-Remote-User": {"carol"}, "X-Remote-Group": {"dev\u2066"}},
	} {
		for _, path := range []string{"/clusters/open/api", "/api/clusters", "/api/clusters/open/resources", "/api/resources",
			"/api/kubeconfig", "/api/events", "/", "/cluster/open"} {
			// An event stream that let them in would never end: the
			// deadline only bounds that failure.
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			code, body, _ := callWithin(t, ctx, "GET", h.url+path, "", who)
			cancel()
			if code != http.StatusForbidden || !strings.Contains(body, "act as you in the cluster") {
				t.Errorf("%v on %s: %d %.200s, want 403", who, path, code, body)
			}
		}
	}
	if n := fc.Count("/api"); n != before {
		t.Errorf("the cluster was asked %d times", n-before)
	}
	if strings.Contains(audit.String(), "system:admin") || strings.Contains(audit.String(), `"person":"carol`) {
		t.Errorf("the audit log names the refused as someone: %s", audit)
	}
	// Names in other scripts, with colons, pass.
	if code, body, _ := call(t, "GET", h.url+"/clusters/open/api", "", http.Header{"X-Remote-User": {"محمد"}, "X-Remote-Group": {"開発,team:dev"}}); code != 200 {
		t.Errorf("a name in Arabic: %d %s", code, body)
	}
}

// TestOIDCNamesThatReadAsOthersAreRefused: the same from an OIDC claim,
// on an impersonated cluster and a forwardToken one alike: the latter isn't
// impersonated, but the hub's audit line and page would still show the name.
func TestOIDCNamesThatReadAsOthersAreRefused(t *testing.T) {
	fc := fakecluster.New(t)
	issuer, h, _ := oidcHub(t, fc)
	before := fc.Count("/api")
	for _, claims := range []map[string]any{
		{"email": "\u200bdana@example.com", "email_verified": true},
		{"email": "dana@example.com", "email_verified": true, "groups": []string{"dev", "system\uff1amasters"}},
		{"email": "dana@example.com", "email_verified": true, "groups": []string{"ops\u202e"}},
	} {
		token := issuer.IDToken(t, claims)
		for _, path := range []string{"/clusters/open/api", "/clusters/own/api", "/api/clusters", "/api/kubeconfig"} {
			if code, body, _ := call(t, "GET", h.url+path, token, nil); code != http.StatusForbidden {
				t.Errorf("%v on %s: %d %.200s, want 403", claims, path, code, body)
			}
		}
	}
	if n := fc.Count("/api"); n != before {
		t.Errorf("the cluster was asked %d times", n-before)
	}
}
