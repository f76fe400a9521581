package server

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/testutil/fakecluster"
	"github.com/tetherhq/tether/internal/web"
)

// TestSignOutEndsTheSession: after "Sign out", the session cookie's token
// no longer works anywhere, though someone may have copied it; the page's
// live events in another tab stop; and a kubeconfig downloaded in the
// session still works, since kubectl is not the page.
func TestSignOutEndsTheSession(t *testing.T) {
	fc := fakecluster.New(t)
	h, _ := proxyHub(t, fc, "", func(c *Config) { c.EventsKeepAlive = 50 * time.Millisecond }, selfPublic)
	cookie := func(value string) http.Header {
		return http.Header{"Cookie": {web.SessionCookie + "=" + value}, "Origin": {h.url}}
	}
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	login, _ := http.NewRequest("POST", h.url+"/login", strings.NewReader("token="+aliceToken))
	login.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	login.Header.Set("Origin", h.url)
	resp, err := noFollow.Do(login)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var session string
	for _, c := range resp.Cookies() {
		if c.Name == web.SessionCookie {
			session = c.Value
		}
	}
	if session == "" {
		t.Fatalf("sign-in: %d, no session cookie", resp.StatusCode)
	}
	if code, body, _ := call(t, "GET", h.url+"/api/clusters", "", cookie(session)); code != http.StatusOK {
		t.Fatalf("/api/clusters in the session: %d %s", code, body)
	}
	code, kc, _ := call(t, "GET", h.url+"/api/kubeconfig", "", cookie(session))
	m := regexp.MustCompile(`token: (\S+)`).FindStringSubmatch(kc)
	if code != http.StatusOK || m == nil {
		t.Fatalf("the kubeconfig in the session: %d\n%s", code, kc)
	}
	kubeconfig := m[1]
	if kubeconfig == session {
		t.Fatal("the kubeconfig holds the session's own token: signing out would end it")
	}
	// Its token gets a kubeconfig of its own too, expiring with it
	// (internal/auth TestSessionsExpireWithTheirSource).
	if code, body, _ := call(t, "GET", h.url+"/api/kubeconfig", kubeconfig, nil); code != http.StatusOK || !strings.Contains(body, "token: ") {
		t.Errorf("a kubeconfig asked for with the kubeconfig's token: %d %.200s", code, body)
	}

	// Another tab follows the fleet's events.
	req, _ := http.NewRequestWithContext(t.Context(), "GET", h.url+"/api/events", nil)
	req.Header = cookie(session)
	events, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer events.Body.Close()
	ended := make(chan struct{})
	go func() { io.Copy(io.Discard, events.Body); close(ended) }()

	if code, _, _ := call(t, "POST", h.url+"/logout", "", cookie(session)); code != http.StatusSeeOther {
		t.Fatalf("sign-out: %d, want 303", code)
	}
	for _, path := range []string{"/api/clusters", "/api/kubeconfig", "/api/resources?kind=pods"} {
		if code, body, _ := call(t, "GET", h.url+path, "", cookie(session)); code != http.StatusUnauthorized {
			t.Errorf("%s with the cookie of a session signed out: %d %.100s, want 401", path, code, body)
		}
	}
	if code, body, _ := call(t, "GET", h.url+"/", "", cookie(session)); code != http.StatusOK || !strings.Contains(body, `id="token"`) {
		t.Errorf("the page with that cookie: %d, want the sign-in form\n%.300s", code, body)
	}
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Error("the events stream of the session signed out went on")
	}
	if code, body, _ := call(t, "GET", h.url+"/clusters/open/api", kubeconfig, nil); code != http.StatusOK {
		t.Errorf("the kubeconfig got in the session, after sign-out: %d %.100s, want 200", code, body)
	}
}
