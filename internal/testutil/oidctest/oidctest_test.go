package oidctest

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestIssuer(t *testing.T) {
	i := Start(t, Options{})
	c := i.Client()
	defer c.CloseIdleConnections()
	var disc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	get(t, c, i.URL+"/.well-known/openid-configuration", &disc)
	if disc.Issuer != i.URL || disc.JWKSURI != i.URL+"/keys" {
		t.Errorf("discovery = %+v", disc)
	}
	old := i.SigningKey()
	i.RotateKey(t)
	var set jose.JSONWebKeySet
	get(t, c, disc.JWKSURI, &set)
	if len(set.Keys) != 2 || set.Keys[0].KeyID != i.SigningKey().ID || set.Keys[1].KeyID != old.ID {
		t.Fatalf("keys = %+v", set.Keys)
	}
	raw := i.IDToken(t, map[string]any{"email": "a@example.com"})
	tok, err := jwt.ParseSigned(raw, []jose.SignatureAlgorithm{jose.RS256})
	if err != nil {
		t.Fatal(err)
	}
	var std jwt.Claims
	var extra struct {
		Email string `json:"email"`
	}
	if err := tok.Claims(set.Keys[0].Key, &std, &extra); err != nil {
		t.Fatal(err)
	}
	if std.Issuer != i.URL || !std.Audience.Contains(DefaultClientID) || std.Subject != "user-1" || extra.Email != "a@example.com" {
		t.Errorf("claims = %+v %+v", std, extra)
	}

	i.SetDown(true)
	resp, err := c.Get(i.URL + "/keys")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || i.Requests("/keys") != 2 {
		t.Errorf("down: %d, %d requests", resp.StatusCode, i.Requests("/keys"))
	}
	i.Close()
	i.Close()
}

func get(t *testing.T, c *http.Client, url string, v any) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}
