package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/testutil/browser"
)

// manyGroups returns a hub's Authenticator, and a kubeconfig's token from
// it for carol, signed in through an auth proxy and in n groups of 29
// characters, as directory groups often are. (A token of someone on the
// users list carries no groups: the list gives them.)
func manyGroups(t *testing.T, n int) (*auth.Authenticator, string) {
	t.Helper()
	people, err := auth.New(auth.Config{Users: testUsers})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { people.Close() })
	var groups []string
	for i := range n {
		groups = append(groups, fmt.Sprintf("team-platform-engineering-%03d", i))
	}
	token, _, err := people.IssueToken(auth.Person{Name: "carol@example.com", Source: auth.SourceProxy, Groups: groups})
	if err != nil {
		t.Fatal(err)
	}
	return people, token
}

// TestSessionOfManyGroupsFitsInABrowser: the session cookie holds a hub
// token with every group of the person in it (signed in with OIDC, or a
// kubeconfig's token), and a browser drops a cookie over 4 KiB without a
// word: someone in 120 groups signed in and saw the sign-in form again. The token goes in pieces; each fits, a browser keeps
// them, and signing out clears them all.
func TestSessionOfManyGroupsFitsInABrowser(t *testing.T) {
	people, token := manyGroups(t, 120)
	h := startHub(t, Config{Agents: testAgents("eu-1"), Auth: people, PublicURL: selfURL})

	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	form := func(path, body string, cookies []*http.Cookie) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("POST", h.url+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", h.url)
		for _, c := range cookies {
			req.AddCookie(c)
		}
		resp, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	resp := form("/login", url.Values{"token": {token}}.Encode(), nil)
	pieces := resp.Cookies()
	if resp.StatusCode != http.StatusSeeOther || len(pieces) < 2 {
		t.Fatalf("sign-in: %s, cookies %d; want 303 and the session in pieces", resp.Status, len(pieces))
	}
	for _, c := range pieces {
		if n := len(c.Name) + 1 + len(c.Value); n > 4096 {
			t.Errorf("cookie %s: %d bytes of name and value, over the 4096 a browser keeps", c.Name, n)
		}
	}
	header := http.Header{"Origin": {h.url}}
	for _, c := range pieces {
		header.Add("Cookie", c.Name+"="+c.Value)
	}
	if code, body, _ := call(t, "GET", h.url+"/api/clusters", "", header); code != http.StatusOK {
		t.Errorf("/api/clusters with the pieces: %d %.200s", code, body)
	}
	cleared := map[string]bool{}
	for _, c := range form("/logout", "", pieces).Cookies() {
		cleared[c.Name] = c.MaxAge < 0
	}
	for _, c := range pieces {
		if !cleared[c.Name] {
			t.Errorf("sign-out left cookie %s", c.Name)
		}
	}

	ctx := browser.New(t)
	sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	// The token is long: set, not typed.
	if err := chromedp.Do(sctx, chromedp.Navigate(h.url+"/"), chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SetValue(chromedp.CSS("#token"), token), chromedp.KeyEvent("\r"), chromedp.WaitVisible(chromedp.CSS(".who"))); err != nil {
		browser.Screenshot(t, ctx, "failed")
		t.Fatalf("signing in as someone in 120 groups, in a browser: %v", err)
	}
	// Read by a script, not by a node's id: the page's scripts may
	// replace nodes between a query and a read of what it found.
	const named = `(document.querySelector(".who") || {}).textContent || ""`
	if err := chromedp.Do(sctx, chromedp.Poll[chromedp.Void](named+`.includes("carol@example.com")`, chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		who, _ := chromedp.Run(sctx, chromedp.Evaluate[string](named))
		t.Errorf("signed in, the page names %q (%v)", who, err)
	}
}

// TestSessionOfTooManyGroups: a session too large for the pieces a
// browser and an ingress take says so on the sign-in form, and points to a
// kubeconfig, rather than send the browser round again.
func TestSessionOfTooManyGroups(t *testing.T) {
	people, token := manyGroups(t, 600)
	h := startHub(t, Config{Agents: testAgents("eu-1"), Auth: people, PublicURL: selfURL})
	req, _ := http.NewRequest("POST", h.url+"/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", h.url)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	code, body := resp.StatusCode, string(b)
	if len(resp.Cookies()) > 0 {
		t.Errorf("sign-in in 600 groups set cookies: %v", resp.Cookies())
	}
	if code != http.StatusBadRequest || !strings.Contains(body, "too many groups (600)") || !strings.Contains(body, "api/kubeconfig") {
		t.Errorf("sign-in in 600 groups: %d\n%.500s\nwant 400 saying why and pointing to a kubeconfig", code, body)
	}
}
