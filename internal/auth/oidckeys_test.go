package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
)

// TestIssuerKeysWaitEndsWithTheRequest: a request whose token starts a
// fetch of the issuer's keys stops waiting when it ends, though the issuer
// is slow to answer; the fetch goes on, and a later request gets its keys.
func TestIssuerKeysWaitEndsWithTheRequest(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
		w.Write([]byte(`{"keys":[{"kty":"oct","k":"c2VjcmV0","kid":"a"}]}`))
	}))
	defer srv.Close()
	// Should the wait not end with the request, the issuer answers after
	// 10 s, and the test fails instead of hanging.
	slow := time.AfterFunc(10*time.Second, func() { close(release) })
	k := &issuerKeys{url: srv.URL, client: srv.Client(), life: t.Context(), now: time.Now, spawn: spawnForTest(t)}

	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := k.refresh(ctx, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("the request that started the fetch: %v after %v; want it to give up when it ends", err, time.Since(start).Round(time.Millisecond))
	}
	if slow.Stop() {
		close(release)
	}
	keys, err := k.refresh(t.Context(), 0) // waits for the fetch in flight
	if err != nil || len(keys) != 1 || keys[0].KeyID != "a" {
		t.Errorf("the next request: %v, %v; want the issuer's key", keys, err)
	}
}

// TestIssuerKeysFetchedSinceTheyWereRead: a request that read the keys
// before a fetch ended, and found none that verifies its token, takes that
// fetch's keys; it is not refused for the cooldown the fetch began.
func TestIssuerKeysFetchedSinceTheyWereRead(t *testing.T) {
	var fetches atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		w.Write([]byte(`{"keys":[{"kty":"oct","k":"c2VjcmV0","kid":"a"}]}`))
	}))
	defer srv.Close()
	k := &issuerKeys{url: srv.URL, client: srv.Client(), life: t.Context(), now: time.Now, spawn: spawnForTest(t)}

	// Two requests read the keys (none yet); the first fetches them.
	if _, err := k.refresh(t.Context(), 0); err != nil {
		t.Fatal(err)
	}
	keys, err := k.refresh(t.Context(), 0)
	if err != nil || len(keys) != 1 || keys[0].KeyID != "a" {
		t.Errorf("the second request: %v, %v; want the key the first one fetched", keys, err)
	}
	if n := fetches.Load(); n != 1 {
		t.Errorf("%d fetches; want 1", n)
	}
	// A request that read the fetched keys and still found none is refused
	// within the cooldown.
	if _, err := k.refresh(t.Context(), 1); err == nil || !strings.Contains(err.Error(), "fetches them again") {
		t.Errorf("a request that saw the last fetch: %v; want the cooldown's refusal", err)
	}
}

// spawnForTest runs each fetch in a goroutine the test waits for as it ends.
func spawnForTest(t *testing.T) func(func()) bool {
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	return func(f func()) bool {
		wg.Go(f)
		return true
	}
}

// FuzzParseKeys feeds the issuer's key set (its jwks_uri's answer, which the
// hub fetches over the network) and any token to what verifies tokens with
// them: nothing panics, a set that doesn't parse gives no keys, and a token
// the issuer signed verifies whatever other keys the set holds, even keys
// that claim its key ID.
func FuzzParseKeys(f *testing.F) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: priv, KeyID: "k1"}}, nil)
	if err != nil {
		f.Fatal(err)
	}
	signed, err := signer.Sign([]byte(`{"sub":"ann"}`))
	if err != nil {
		f.Fatal(err)
	}
	token, err := signed.CompactSerialize()
	if err != nil {
		f.Fatal(err)
	}
	own, err := json.Marshal(jose.JSONWebKey{Key: &priv.PublicKey, KeyID: "k1", Algorithm: "ES256", Use: "sig"})
	if err != nil {
		f.Fatal(err)
	}
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	impostor, _ := json.Marshal(jose.JSONWebKey{Key: &other.PublicKey, KeyID: "k1", Algorithm: "ES256"})
	f.Add([]byte(`{"keys":[`+string(own)+`]}`), token)
	f.Add([]byte(`{"keys":[`+string(impostor)+`,{"kty":"oct","k":"c2VjcmV0","kid":"k1"},{"kty":"RSA","n":"AQAB","e":"AQAB"}]}`), token)
	f.Add([]byte(`{"keys":[{"kty":"EC","crv":"P-256","x":"","y":""},{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"},7,null]}`), "e30.e30.")
	f.Add([]byte(`{"keys":{}}`), "a.b.c")
	f.Fuzz(func(t *testing.T, body []byte, raw string) {
		keys, err := parseKeys(body)
		if err != nil {
			if keys != nil {
				t.Fatalf("keys %v with the error %v", keys, err)
			}
			return
		}
		for _, k := range keys {
			if k.Key == nil {
				t.Fatalf("kept a key go-jose didn't read: %+v", k)
			}
		}
		if jws, err := jose.ParseSigned(raw, signingAlgs); err == nil && len(jws.Signatures) > 0 {
			verifyWith(keys, jws)
		}
		var issuers jose.JSONWebKey
		if err := json.Unmarshal(own, &issuers); err != nil {
			t.Fatal(err)
		}
		jws, err := jose.ParseSigned(token, signingAlgs)
		if err != nil {
			t.Fatal(err)
		}
		if payload, ok := verifyWith(append(keys, issuers), jws); !ok || string(payload) != `{"sub":"ann"}` {
			t.Fatalf("the issuer's own token: %q, %v, with %d other keys", payload, ok, len(keys))
		}
	})
}
