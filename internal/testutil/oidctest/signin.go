package oidctest

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"net/url"
	"testing"
)

// The authorization-code flow with PKCE, as a browser's sign-in uses it:
// /authorize approves at once, as the person SetSignIn names, and /token
// trades the code for an ID token once, with the verifier.

// signIn is a code waiting to be traded.
type signIn struct {
	claims      map[string]any
	nonce       string
	challenge   string
	redirectURI string
}

// SetSignIn sets the claims of whoever signs in next through /authorize.
// t signs the ID tokens /token hands out.
func (i *Issuer) SetSignIn(t testing.TB, claims map[string]any) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.signInT, i.signInClaims = t, claims
}

func (i *Issuer) serveAuthorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if q.Get("response_type") != "code" || q.Get("client_id") != i.ClientID || q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" {
		http.Error(w, "want response_type=code, our client_id and an S256 code_challenge", http.StatusBadRequest)
		return
	}
	redirect, err := url.Parse(q.Get("redirect_uri"))
	if err != nil || redirect.Host == "" {
		http.Error(w, "bad redirect_uri", http.StatusBadRequest)
		return
	}
	var b [16]byte
	rand.Read(b[:])
	code := hex.EncodeToString(b[:])
	i.mu.Lock()
	if i.codes == nil {
		i.codes = map[string]signIn{}
	}
	i.codes[code] = signIn{claims: i.signInClaims, nonce: q.Get("nonce"), challenge: q.Get("code_challenge"), redirectURI: redirect.String()}
	i.mu.Unlock()
	v := redirect.Query()
	v.Set("code", code)
	v.Set("state", q.Get("state"))
	redirect.RawQuery = v.Encode()
	http.Redirect(w, r, redirect.String(), http.StatusFound)
}

func (i *Issuer) serveToken(w http.ResponseWriter, r *http.Request) {
	code := r.PostFormValue("code")
	i.mu.Lock()
	s, ok := i.codes[code]
	delete(i.codes, code) // a code works once
	t := i.signInT
	i.mu.Unlock()
	sum := sha256.Sum256([]byte(r.PostFormValue("code_verifier")))
	switch {
	case !ok || r.PostFormValue("grant_type") != "authorization_code":
		http.Error(w, `{"error":"invalid_grant"}`, http.StatusBadRequest)
		return
	case base64.RawURLEncoding.EncodeToString(sum[:]) != s.challenge:
		http.Error(w, `{"error":"invalid_grant","error_description":"the code_verifier doesn't match"}`, http.StatusBadRequest)
		return
	case r.PostFormValue("redirect_uri") != s.redirectURI:
		http.Error(w, `{"error":"invalid_grant","error_description":"redirect_uri"}`, http.StatusBadRequest)
		return
	}
	claims := map[string]any{"nonce": s.nonce}
	for k, v := range s.claims {
		claims[k] = v
	}
	writeJSON(w, map[string]any{
		"access_token": "opaque", "token_type": "Bearer", "expires_in": 3600,
		"id_token": i.IDToken(t, claims),
	})
}
