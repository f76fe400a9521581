package server

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/listfile"
	"github.com/tetherhq/tether/internal/testutil/fakecluster"
	"github.com/tetherhq/tether/internal/testutil/oidctest"
)

// TestOIDCPeople checks people signed in with an OIDC ID token: impersonated
// on ordinary clusters, their own token forwarded (and nothing else) on a
// forwardToken cluster, and bad tokens refused.
func TestOIDCPeople(t *testing.T) {
	fc := fakecluster.New(t)
	issuer, h, list := oidcHub(t, fc)
	good := issuer.IDToken(t, map[string]any{"email": "dana@example.com", "email_verified": true, "groups": []string{"dev"}})

	seen := func(cluster, token string) http.Header {
		t.Helper()
		code, body, _ := call(t, "GET", h.url+"/clusters/"+cluster+"/api", token, nil)
		if code != 200 {
			t.Fatalf("%s: %d %s", cluster, code, body)
		}
		var got struct{ Header http.Header }
		json.Unmarshal([]byte(body), &got)
		return got.Header
	}
	if hd := seen("open", good); hd.Get("Impersonate-User") != "dana@example.com" || hd.Get("Impersonate-Group") != "dev" ||
		hd.Get("Authorization") != "Bearer service-account-token-1" {
		t.Errorf("an ordinary cluster saw %v", hd)
	}
	hd := seen("own", good)
	if hd.Get("Authorization") != "Bearer "+good {
		t.Errorf("a forwardToken cluster got Authorization %q, want the person's own token", hd.Get("Authorization"))
	}
	for k := range hd {
		if len(k) >= 12 && k[:12] == "Impersonate-" {
			t.Errorf("a forwardToken cluster got %s", k)
		}
	}

	// A static person can't reach a forwardToken cluster: their token is
	// the hub's, never forwarded.
	static, err := auth.New(auth.Config{Users: testUsers})
	if err != nil {
		t.Fatal(err)
	}
	defer static.Close()
	h2 := startHub(t, Config{Agents: list, Auth: static})
	a2 := startAgent(t, h2.url, "own", fc)
	eventually(t, 5*time.Second, "own connects to the second hub", a2.Connected)
	if code, body, _ := call(t, "GET", h2.url+"/clusters/own/api", aliceToken, nil); code != 403 {
		t.Errorf("a static token on a forwardToken cluster: %d %s", code, body)
	}

	for name, token := range map[string]string{
		"wrong audience": issuer.Sign(t, oidctest.Token{Audience: []string{"someone-else"}, Claims: map[string]any{"email": "dana@example.com", "email_verified": true}}),
		"expired":        issuer.Sign(t, oidctest.Token{IssuedAt: time.Now().Add(-3 * time.Hour), Expiry: time.Now().Add(-2 * time.Hour), Claims: map[string]any{"email": "dana@example.com", "email_verified": true}}),
		"wrong issuer":   issuer.Sign(t, oidctest.Token{Issuer: "https://evil.example.com", Claims: map[string]any{"email": "dana@example.com", "email_verified": true}}),
		"unverified":     issuer.IDToken(t, map[string]any{"email": "dana@example.com", "email_verified": false}),
	} {
		if code, body, _ := call(t, "GET", h.url+"/clusters/open/api", token, nil); code != 401 {
			t.Errorf("%s: %d %s, want 401", name, code, body)
		}
	}
}

// oidcHub starts a hub that takes the ID tokens of a test issuer, with the
// clusters "open" and "own" (forwardToken), both connected to fc.
func oidcHub(t *testing.T, fc *fakecluster.Cluster) (*oidctest.Issuer, *testHub, *fleet.Agents) {
	t.Helper()
	issuer := oidctest.Start(t, oidctest.Options{})
	people, err := auth.New(auth.Config{OIDC: auth.OIDCConfig{Issuer: issuer.URL, ClientID: issuer.ClientID, CAFile: issuer.CAFile(t)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { people.Close() })
	hash := []listfile.Hash{listfile.HashToken(testToken)}
	list := fleet.New([]fleet.Agent{
		{Name: "open", TokenHashes: hash, Groups: fleet.Groups{Everyone: true}},
		{Name: "own", TokenHashes: hash, Groups: fleet.Groups{Everyone: true}, ForwardToken: true},
	})
	h := startHub(t, Config{Agents: list, Auth: people})
	for _, n := range []string{"open", "own"} {
		a := startAgent(t, h.url, n, fc)
		eventually(t, 5*time.Second, n+" connects", a.Connected)
	}
	return issuer, h, list
}

// TestOIDCBrowserSignIn follows a browser's sign-in with the issuer (the
// authorization-code flow with PKCE) with a cookie jar: the hub sends the
// browser to the issuer, takes the code back, and starts a session for the
// person the ID token names.
func TestOIDCBrowserSignIn(t *testing.T) {
	issuer := oidctest.Start(t, oidctest.Options{})
	issuer.SetSignIn(t, map[string]any{"email": "dana@example.com", "email_verified": true, "groups": []string{"dev"}})
	people, err := auth.New(auth.Config{OIDC: auth.OIDCConfig{Issuer: issuer.URL, ClientID: issuer.ClientID, CAFile: issuer.CAFile(t)}})
	if err != nil {
		t.Fatal(err)
	}
	defer people.Close()
	h := startHub(t, Config{Agents: testAgents("eu-1"), Auth: people, PublicURL: selfURL}) // the callback's address

	jar, _ := cookiejar.New(nil)
	client := issuer.Client()
	client.Jar = jar
	resp, err := client.Get(h.url + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(page), `href="/login/oidc"`) {
		t.Fatalf("the sign-in page has no OIDC link:\n%s", page)
	}
	resp, err = client.Get(h.url + "/login/oidc") // to the issuer, back to the callback, on to the page
	if err != nil {
		t.Fatal(err)
	}
	page, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(page), "Signed in as <strong>dana@example.com</strong>") {
		t.Fatalf("after the sign-in: %d\n%s", resp.StatusCode, page)
	}
	// The session works for the API too.
	resp, err = client.Get(h.url + "/api/clusters")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"name":"eu-1"`) {
		t.Errorf("/api/clusters with the session: %d %s", resp.StatusCode, body)
	}

	// Signing in from a cluster's page goes back to it.
	jar2, _ := cookiejar.New(nil)
	client.Jar = jar2
	resp, err = client.Get(h.url + "/cluster/eu-1")
	if err != nil {
		t.Fatal(err)
	}
	page, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	link := regexp.MustCompile(`href="(/login/oidc[^"]*)"`).FindStringSubmatch(string(page))
	if link == nil || link[1] != "/login/oidc?next=%2Fcluster%2Feu-1" {
		t.Fatalf("the cluster page's OIDC link: %v", link)
	}
	resp, err = client.Get(h.url + link[1])
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Request.URL.Path != "/cluster/eu-1" {
		t.Errorf("signed in from /cluster/eu-1, the browser is at %s (%d)", resp.Request.URL.Path, resp.StatusCode)
	}
	// Elsewhere is not a place to go back to.
	resp, err = client.Get(h.url + "/login/oidc?next=//evil.example.com/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Request.URL.Host != strings.TrimPrefix(h.url, "http://") || resp.Request.URL.Path != "/" {
		t.Errorf("next=//evil.example.com/ took the browser to %s", resp.Request.URL)
	}

	// A callback this browser didn't start is refused.
	resp, err = client.Get(h.url + "/login/oidc/callback?code=x&state=forged")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a forged callback: %d, want 400", resp.StatusCode)
	}
}
