package hub

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/testutil/oidctest"
)

// TestOIDCPeople checks people signed in with an OIDC ID token: impersonated
// on ordinary clusters, their own token forwarded (and nothing else) on a
// forwardToken cluster, and bad tokens refused.
func TestOIDCPeople(t *testing.T) {
	issuer := oidctest.Start(t, oidctest.Options{})
	people, err := auth.New(auth.Config{OIDC: auth.OIDCConfig{Issuer: issuer.URL, ClientID: issuer.ClientID, CAFile: issuer.CAFile(t)}})
	if err != nil {
		t.Fatal(err)
	}
	defer people.Close()
	hash := []fleet.Hash{fleet.HashToken(testToken)}
	list := fleet.New([]fleet.Agent{
		{Name: "open", TokenHashes: hash, Groups: fleet.Groups{Everyone: true}},
		{Name: "own", TokenHashes: hash, Groups: fleet.Groups{Everyone: true}, ForwardToken: true},
	})
	fc := newFakeCluster(t)
	h := startHub(t, Config{Agents: list, Auth: people})
	for _, n := range []string{"open", "own"} {
		a := startAgent(t, h.url, n, fc)
		eventually(t, 5*time.Second, n+" connects", a.Connected)
	}
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
