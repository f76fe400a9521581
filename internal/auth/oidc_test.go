package auth

import (
	"crypto/sha256"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/testutil/oidctest"
)

// oidcAuth starts an issuer and an Authenticator that trusts it.
func oidcAuth(t *testing.T, issOpts oidctest.Options, cfg Config) (*oidctest.Issuer, *Authenticator) {
	t.Helper()
	iss := oidctest.Start(t, issOpts)
	cfg.OIDC.Issuer, cfg.OIDC.ClientID, cfg.OIDC.CAFile = iss.URL, iss.ClientID, iss.CAFile(t)
	return iss, newAuth(t, cfg)
}

var verified = map[string]any{"email": "alice@example.com", "email_verified": true}

func with(base map[string]any, kv ...any) map[string]any {
	m := map[string]any{}
	for k, v := range base {
		m[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(m, kv[i].(string))
		} else {
			m[kv[i].(string)] = kv[i+1]
		}
	}
	return m
}

func TestOIDC(t *testing.T) {
	iss, a := oidcAuth(t, oidctest.Options{}, Config{})
	for _, tc := range []struct {
		name   string
		claims map[string]any
		groups []string
	}{
		{"groups list", with(verified, "groups", []string{"dev", "platform"}), []string{"dev", "platform"}},
		{"one group as text", with(verified, "groups", "dev"), []string{"dev"}},
		{"no groups", verified, nil},
		{"null groups", with(verified, "groups", []any{}), []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok := iss.IDToken(t, tc.claims)
			p, ok, err := a.Authenticate(bearer(tok))
			if !ok || err != nil {
				t.Fatalf("%v %v", ok, err)
			}
			if p.Name != "alice@example.com" || !slices.Equal(p.Groups, tc.groups) || p.Source != SourceOIDC || p.Bearer != tok {
				t.Errorf("got %+v", p)
			}
		})
	}
	if got := a.Sources(); !slices.Equal(got, []string{"hub", "oidc"}) {
		t.Errorf("Sources = %v", got)
	}
}

func TestOIDCRefused(t *testing.T) {
	clock := newFakeClock()
	iss, a := oidcAuth(t, oidctest.Options{Now: clock.Now}, Config{Now: clock.Now})
	other := oidctest.NewKey(t)
	now := clock.Now()
	for _, tc := range []struct {
		name string
		tok  oidctest.Token
		err  error
		want string
	}{
		{"wrong issuer", oidctest.Token{Issuer: "https://other.example.com", Claims: verified}, ErrInvalidToken,
			`invalid bearer token: an OIDC ID token the hub can't accept: oidc: id token issued by a different provider, expected "` + iss.URL + `" got "https://other.example.com"`},
		{"wrong audience", oidctest.Token{Audience: []string{"kubernetes"}, Claims: verified}, ErrInvalidToken,
			`invalid bearer token: an OIDC ID token the hub can't accept: oidc: expected audience "tether" got ["kubernetes"]`},
		{"expired", oidctest.Token{IssuedAt: now.Add(-2 * time.Hour), Expiry: now.Add(-time.Second), Claims: verified}, ErrExpired,
			`expired bearer token: an OIDC ID token that expired at ` + now.Add(-time.Second).Format(time.RFC3339) + `; sign in again`},
		{"not yet valid", oidctest.Token{NotBefore: now.Add(time.Hour), Claims: verified}, ErrInvalidToken,
			`invalid bearer token: an OIDC ID token the hub can't accept: oidc: current time 2026-03-01 12:00:00 +0000 UTC before the nbf (not before) time`},
		{"another key", oidctest.Token{Key: other, Claims: verified}, ErrInvalidToken,
			`invalid bearer token: an OIDC ID token the hub can't accept: failed to verify signature`},
		{"another key under the issuer's key id", oidctest.Token{Key: other, KeyID: iss.SigningKey().ID, Claims: verified}, ErrInvalidToken,
			`invalid bearer token: an OIDC ID token the hub can't accept: failed to verify signature`},
		{"email not verified", oidctest.Token{Claims: with(verified, "email_verified", false)}, ErrInvalidToken,
			`invalid bearer token: an OIDC ID token for "alice@example.com", an email address the issuer hasn't verified (email_verified is not true); verify it, or name people by another claim (TETHER_OIDC_USERNAME_CLAIM)`},
		{"email_verified missing", oidctest.Token{Claims: with(verified, "email_verified", nil)}, ErrInvalidToken,
			`invalid bearer token: an OIDC ID token for "alice@example.com", an email address the issuer hasn't verified`},
		{"email_verified as text", oidctest.Token{Claims: with(verified, "email_verified", "true")}, ErrInvalidToken,
			`invalid bearer token: an OIDC ID token for "alice@example.com", an email address the issuer hasn't verified`},
		{"no email", oidctest.Token{Claims: map[string]any{"email_verified": true}}, ErrInvalidToken,
			`invalid bearer token: an OIDC ID token without a "email" claim as text, which names the person (TETHER_OIDC_USERNAME_CLAIM)`},
		{"email not text", oidctest.Token{Claims: with(verified, "email", []string{"a@example.com"})}, ErrInvalidToken,
			`invalid bearer token: an OIDC ID token without a "email" claim as text`},
		{"groups a number", oidctest.Token{Claims: with(verified, "groups", 7)}, ErrInvalidToken,
			`invalid bearer token: an OIDC ID token whose "groups" claim is not text or a list of texts (TETHER_OIDC_GROUPS_CLAIM)`},
		{"groups with a number", oidctest.Token{Claims: with(verified, "groups", []any{"dev", 7})}, ErrInvalidToken,
			`invalid bearer token: an OIDC ID token whose "groups" claim is not text or a list of texts (TETHER_OIDC_GROUPS_CLAIM)`},
		// Issue 33: claims that read as other names in a log line.
		{"zero-width name", oidctest.Token{Claims: with(verified, "email", "\u200badmin@example.com")}, ErrIdentity,
			`the hub can't act as you in the cluster: your user name "\u200badmin@example.com" contains invisible formatting characters (zero-width or bidi)`},
		{"bidi group", oidctest.Token{Claims: with(verified, "groups", []any{"dev", "ops\u202e"})}, ErrIdentity,
			`the hub can't act as you in the cluster: your group "ops\u202e" contains invisible formatting characters (zero-width or bidi)`},
		{"fullwidth colon group", oidctest.Token{Claims: with(verified, "groups", "system：masters")}, ErrIdentity,
			`the hub can't act as you in the cluster: your group "system：masters" contains a fullwidth colon (U+FF1A), which reads as ":"`},
		{"control character in a group", oidctest.Token{Claims: with(verified, "groups", []any{"dev\n"})}, ErrIdentity,
			`the hub can't act as you in the cluster: your group "dev\n" contains control characters`},
		// A token the issuer signed but that names the hub as its issuer is checked as a hub
		// token, against the hub's keys only.
		{"posing as a hub token", oidctest.Token{Issuer: "tether-hub", Audience: []string{"tether-hub"}, Claims: verified}, ErrInvalidToken,
			`invalid bearer token: a hub-issued token that can't be read: unexpected signature algorithm "RS256"; expected ["EdDSA"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, ok, err := a.Authenticate(bearer(iss.Sign(t, tc.tok)))
			if ok || !errors.Is(err, tc.err) {
				t.Fatalf("got %+v %v %v, want %v", p, ok, err, tc.err)
			}
			if !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("error:\n got %s\nwant %s", err, tc.want)
			}
		})
	}
}

func TestOIDCClaims(t *testing.T) {
	iss, a := oidcAuth(t, oidctest.Options{ClientID: "hub"}, Config{OIDC: OIDCConfig{UsernameClaim: "preferred_username", GroupsClaim: "roles"}})
	tok := iss.IDToken(t, map[string]any{"preferred_username": "alice", "roles": "admin", "groups": []string{"ignored"}})
	p, ok, err := a.Authenticate(bearer(tok))
	if !ok || err != nil || p.Name != "alice" || !slices.Equal(p.Groups, []string{"admin"}) {
		t.Fatalf("got %+v %v %v", p, ok, err)
	}
	// Any audience list that holds the client ID will do.
	tok = iss.Sign(t, oidctest.Token{Audience: []string{"other", "hub"}, Claims: map[string]any{"preferred_username": "bob"}})
	if p, ok, err := a.Authenticate(bearer(tok)); !ok || p.Name != "bob" {
		t.Fatalf("got %+v %v %v", p, ok, err)
	}
}

// TestOIDCKeyRotation: a token signed with a key the hub hasn't fetched
// makes it fetch the issuer's keys again, if the last fetch started
// keysCooldown ago or more.
func TestOIDCKeyRotation(t *testing.T) {
	clock := newFakeClock()
	iss, a := oidcAuth(t, oidctest.Options{Now: clock.Now}, Config{Now: clock.Now})
	if _, ok, err := a.Authenticate(bearer(iss.IDToken(t, verified))); !ok {
		t.Fatal(err)
	}
	iss.RotateKey(t)
	clock.Advance(keysCooldown - time.Second)
	tok := iss.IDToken(t, verified)
	_, ok, err := a.Authenticate(bearer(tok))
	if ok || !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("a token signed with the issuer's new key within the cooldown: %v %v", ok, err)
	}
	if want := "none of the issuer's keys verifies it, as fetched 29s ago; the hub fetches them again 30s after that at the earliest"; !strings.HasSuffix(err.Error(), want) {
		t.Errorf("error:\n got %s\nwant it to end %s", err, want)
	}
	if n := iss.Requests("/keys"); n != 1 {
		t.Errorf("%d fetches of the keys, want 1", n)
	}
	clock.Advance(time.Second)
	if _, ok, err := a.Authenticate(bearer(tok)); !ok {
		t.Fatalf("a token signed with the issuer's new key: %v", err)
	}
	if n := iss.Requests("/keys"); n != 2 {
		t.Errorf("%d fetches of the keys, want 2", n)
	}
}

// TestOIDCMadeUpTokens: tokens no key of the issuer's verifies, however
// many and at once, make the hub fetch the keys once per keysCooldown.
func TestOIDCMadeUpTokens(t *testing.T) {
	clock := newFakeClock()
	iss, a := oidcAuth(t, oidctest.Options{Now: clock.Now}, Config{Now: clock.Now})
	other := oidctest.NewKey(t)
	made := []string{
		iss.Sign(t, oidctest.Token{Key: other, Claims: verified}),
		iss.Sign(t, oidctest.Token{Key: other, KeyID: iss.SigningKey().ID, Claims: verified}),
		iss.Sign(t, oidctest.Token{Key: other, KeyID: "made-up", Claims: verified}),
	}
	for round := 1; round <= 2; round++ {
		var wg sync.WaitGroup
		for i := range 30 {
			wg.Go(func() {
				if _, ok, err := a.Authenticate(bearer(made[i%len(made)])); ok || !errors.Is(err, ErrInvalidToken) {
					t.Errorf("a made-up token: %v %v", ok, err)
				}
			})
		}
		wg.Wait()
		if n := iss.Requests("/keys"); n != round {
			t.Errorf("after round %d: %d fetches of the keys, want %d", round, n, round)
		}
		// The issuer's own tokens still pass.
		if _, ok, err := a.Authenticate(bearer(iss.IDToken(t, with(verified, "round", round)))); !ok {
			t.Fatalf("the issuer's token: %v", err)
		}
		clock.Advance(keysCooldown)
	}
}

// TestOIDCKeysUnavailable: while the issuer can't give its keys, ID tokens
// are refused with its answer, and it is asked again after the cooldown.
func TestOIDCKeysUnavailable(t *testing.T) {
	clock := newFakeClock()
	iss, a := oidcAuth(t, oidctest.Options{Now: clock.Now}, Config{Now: clock.Now})
	if _, err := a.oidc.getVerifier(t.Context()); err != nil {
		t.Fatal(err)
	}
	iss.SetDown(true)
	tok := iss.IDToken(t, verified)
	_, ok, err := a.Authenticate(bearer(tok))
	if ok || !strings.Contains(err.Error(), "fetching the issuer's keys: 503 Service Unavailable: the issuer is down") {
		t.Fatalf("while the keys can't be fetched: %v %v", ok, err)
	}
	iss.SetDown(false)
	if _, ok, err := a.Authenticate(bearer(tok)); ok || !strings.Contains(err.Error(), "the hub fetches them again 30s after that") {
		t.Fatalf("within the cooldown: %v %v", ok, err)
	}
	clock.Advance(keysCooldown)
	if _, ok, err := a.Authenticate(bearer(tok)); !ok {
		t.Fatalf("once the keys can be fetched: %v", err)
	}
}

// TestOIDCTokenRemembered: an ID token checked once is taken without a new
// check for a minute at most (the issuer may drop its key), and never past
// its expiry.
func TestOIDCTokenRemembered(t *testing.T) {
	clock := newFakeClock()
	iss, a := oidcAuth(t, oidctest.Options{Now: clock.Now}, Config{Now: clock.Now})
	start := clock.Now()
	long := iss.Sign(t, oidctest.Token{Claims: verified})
	short := iss.Sign(t, oidctest.Token{Claims: verified, Expiry: start.Add(30 * time.Second)})
	for _, tok := range []string{long, short} {
		if p, ok, err := a.Authenticate(bearer(tok)); !ok || err != nil || p.Bearer != tok {
			t.Fatalf("%+v %v %v", p, ok, err)
		}
	}
	until := func(tok string) time.Time {
		a.verified.mu.Lock()
		defer a.verified.mu.Unlock()
		return a.verified.m[sha256.Sum256([]byte(tok))].until
	}
	if got, want := until(long), start.Add(oidcRecall); !got.Equal(want) {
		t.Errorf("a token valid for an hour is remembered until %s, want %s", got, want)
	}
	if got, want := until(short), start.Add(30*time.Second); !got.Equal(want) {
		t.Errorf("a token valid for 30 s is remembered until %s, want its expiry %s", got, want)
	}
	clock.Advance(31 * time.Second)
	if _, ok, err := a.Authenticate(bearer(short)); ok || !errors.Is(err, ErrExpired) {
		t.Errorf("the 30 s token, 31 s on: %v %v; want it expired", ok, err)
	}
	clock.Advance(30 * time.Second)
	if _, ok, err := a.Authenticate(bearer(long)); !ok || err != nil {
		t.Fatalf("the hour token, checked again after a minute: %v %v", ok, err)
	}
	if got, want := until(long), clock.Now().Add(oidcRecall); !got.Equal(want) {
		t.Errorf("after its second check the token is remembered until %s, want %s", got, want)
	}
}

// TestOIDCIssuerDown starts the hub while the issuer is down: the start doesn't wait, ID tokens
// are refused with ErrOIDCUnavailable, and discovery is tried again when one arrives, no more
// often than the backoff allows.
func TestOIDCIssuerDown(t *testing.T) {
	clock := newFakeClock()
	log, logs := testLogger()
	iss := oidctest.Start(t, oidctest.Options{Now: clock.Now})
	iss.SetDown(true)
	const discovery = "/.well-known/openid-configuration"
	a := newAuth(t, Config{Now: clock.Now, Logger: log, OIDC: OIDCConfig{Issuer: iss.URL, ClientID: iss.ClientID, CAFile: iss.CAFile(t)}})
	waitFor(t, "the failed discovery in the log", func() bool { return strings.Contains(logs.String(), "Can't reach the OIDC issuer") })
	if !strings.Contains(logs.String(), "503 Service Unavailable") || !strings.Contains(logs.String(), "retryIn=1s") {
		t.Errorf("log: %s", logs)
	}
	if n := iss.Requests(discovery); n != 1 {
		t.Fatalf("%d discoveries at start", n)
	}
	tok := iss.IDToken(t, verified)
	_, ok, err := a.Authenticate(bearer(tok))
	if ok || !errors.Is(err, ErrOIDCUnavailable) {
		t.Fatalf("while down: %v %v", ok, err)
	}
	if want := "the OIDC issuer can't be reached: " + iss.URL + " (503 Service Unavailable: the issuer is down); the hub tries again in 1s at the earliest"; err.Error() != want {
		t.Errorf("error:\n got %s\nwant %s", err, want)
	}
	if n := iss.Requests(discovery); n != 1 {
		t.Errorf("tried again before the backoff: %d discoveries", n)
	}

	clock.Advance(time.Second) // due again: this token tries, and fails; the next wait is 2 s
	if _, _, err := a.Authenticate(bearer(tok)); !errors.Is(err, ErrOIDCUnavailable) {
		t.Fatalf("still down: %v", err)
	}
	if n := iss.Requests(discovery); n != 2 {
		t.Errorf("%d discoveries, want 2", n)
	}
	iss.SetDown(false)
	clock.Advance(time.Second)
	if _, _, err := a.Authenticate(bearer(tok)); !errors.Is(err, ErrOIDCUnavailable) || !strings.Contains(err.Error(), "tries again in 1s") {
		t.Fatalf("within the second backoff: %v", err)
	}
	clock.Advance(time.Second)
	p, ok, err := a.Authenticate(bearer(tok))
	if !ok || err != nil || p.Name != "alice@example.com" {
		t.Fatalf("once the issuer is back: %+v %v %v", p, ok, err)
	}
	if !strings.Contains(logs.String(), "Reached the OIDC issuer") {
		t.Errorf("log: %s", logs)
	}
	// Discovered: no more discovery requests.
	for range 3 {
		_, _, _ = a.Authenticate(bearer(tok))
	}
	if n := iss.Requests(discovery); n != 3 {
		t.Errorf("%d discoveries, want 3", n)
	}
}

func TestOIDCDiscoveryOnce(t *testing.T) {
	iss, a := oidcAuth(t, oidctest.Options{}, Config{})
	tok := iss.IDToken(t, verified)
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if _, ok, err := a.Authenticate(bearer(tok)); !ok {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := iss.Requests("/.well-known/openid-configuration"); n != 1 {
		t.Errorf("%d discoveries for 20 tokens at once", n)
	}
}

func TestOIDCDiscoveryErrors(t *testing.T) {
	t.Run("issuer mismatch", func(t *testing.T) {
		iss, a := oidcAuth(t, oidctest.Options{Issuer: "https://id.example.com"}, Config{})
		_, _, err := a.Authenticate(bearer(iss.IDToken(t, verified)))
		want := `the OIDC issuer can't be reached: ` + iss.URL + ` (oidc: issuer URL provided to client ("` + iss.URL + `") did not match the issuer URL returned by provider ("https://id.example.com"))`
		if !errors.Is(err, ErrOIDCUnavailable) || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("error:\n got %v\nwant %s", err, want)
		}
	})
	t.Run("untrusted certificate", func(t *testing.T) {
		iss := oidctest.Start(t, oidctest.Options{})
		a := newAuth(t, Config{OIDC: OIDCConfig{Issuer: iss.URL, ClientID: iss.ClientID}})
		_, _, err := a.Authenticate(bearer(iss.IDToken(t, verified)))
		if !errors.Is(err, ErrOIDCUnavailable) || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("error: %v", err)
		}
	})
}

// TestCloseDuringDiscovery: an issuer that accepts connections and never answers must not hold
// up Close.
func TestCloseDuringDiscovery(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	var mu sync.Mutex
	var held []net.Conn
	conns.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	})
	defer func() {
		ln.Close()
		conns.Wait()
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	}()
	// The request would give up after a minute: Close must not wait for it.
	a, err := New(Config{OIDC: OIDCConfig{Issuer: "https://" + ln.Addr().String(), ClientID: "c", RequestTimeout: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- a.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close still waits for the discovery of an issuer that doesn't answer")
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	_, _, err = a.Authenticate(bearer("eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJ4In0.c2ln"))
	if !errors.Is(err, ErrOIDCUnavailable) {
		t.Errorf("after Close: %v", err)
	}
}

func TestJWTWithoutOIDC(t *testing.T) {
	iss := oidctest.Start(t, oidctest.Options{})
	a := newAuth(t, Config{Users: "- name: bob\n  token: " + tokBob + "\n"})
	_, ok, err := a.Authenticate(bearer(iss.IDToken(t, verified)))
	want := `invalid bearer token: a JWT issued by "` + iss.URL + `", but no OIDC issuer is set (TETHER_OIDC_ISSUER) and the hub didn't issue it`
	if ok || !errors.Is(err, ErrInvalidToken) || err.Error() != want {
		t.Errorf("error:\n got %v\nwant %s", err, want)
	}
}
