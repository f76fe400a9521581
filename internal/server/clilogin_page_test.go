package server

import (
	"bytes"
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/login"
	"github.com/tetherhq/tether/internal/testutil/browser"
	"github.com/tetherhq/tether/internal/testutil/oidctest"
)

// TestCLILoginInChromium: tether login opens the hub in Chromium, which
// signs in through the test OIDC issuer and comes back to /login/cli; the
// hub hands the command dana's token on its loopback listener, and the
// token lists the hub's clusters as hers.
func TestCLILoginInChromium(t *testing.T) {
	issuer := oidctest.Start(t, oidctest.Options{})
	issuer.SetSignIn(t, map[string]any{"email": "dana@example.com", "email_verified": true, "groups": []string{"dev"}})
	people, err := auth.New(auth.Config{OIDC: auth.OIDCConfig{Issuer: issuer.URL, ClientID: issuer.ClientID, CAFile: issuer.CAFile(t)}})
	if err != nil {
		t.Fatal(err)
	}
	defer people.Close()
	h := startHub(t, Config{Agents: testAgents("eu-1"), Auth: people, PublicURL: selfURL})

	ctx := browser.New(t, chromedp.IgnoreCertErrors)
	open := func(target string) error {
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		// The hub's sign-in page, its OIDC link, the issuer, the hub's
		// callback, /login/cli again, and the command's loopback.
		err := chromedp.Do(sctx, chromedp.Navigate(target), chromedp.Click("#oidc", chromedp.NodeVisible),
			chromedp.WaitVisible(`//p[contains(., "tether login is signed in")]`))
		if err != nil {
			browser.Screenshot(t, ctx, "cli-login-failed")
		}
		return err
	}
	dir := t.TempDir()
	cache := login.Cache{Dir: filepath.Join(dir, "cache")}
	var out, msg bytes.Buffer
	err = login.Login(t.Context(), login.LoginOptions{Hub: h.url, Kubeconfig: filepath.Join(dir, "kubeconfig"), Command: "tether",
		Cache: cache, Now: time.Now, Out: &out, Interactive: login.Interactive{OpenBrowser: open, Msg: &msg}})
	if err != nil {
		t.Fatalf("tether login: %v\n%s", err, msg.String())
	}
	if !strings.Contains(out.String(), "/eu-1") {
		t.Errorf("tether login said %q; want eu-1's context", out.String())
	}
	cached, err := cache.Load(h.url)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := http.NewRequest("GET", h.url+"/api/clusters", nil)
	r.Header.Set("Authorization", "Bearer "+cached.Token)
	if p, ok, err := people.Authenticate(r); !ok || err != nil || p.Name != "dana@example.com" || cached.Method != login.MethodBrowser {
		t.Errorf("the cached token (%s) is %+v %v %v; want dana's", cached.Method, p, ok, err)
	}
	if code, body, _ := call(t, "GET", h.url+"/api/clusters", cached.Token, nil); code != http.StatusOK || !strings.Contains(body, `"eu-1"`) {
		t.Errorf("/api/clusters with the token: %d %s", code, body)
	}
}
