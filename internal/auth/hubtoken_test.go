package auth

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/listfile"
	"github.com/tetherhq/tether/internal/testutil/files"
)

func pemBlock(t testing.TB, typ string, der []byte) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}))
}

func ed25519PEM(t testing.TB) string {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return pemBlock(t, "PRIVATE KEY", der)
}

func rsaPKCS8PEM(t testing.TB) string {
	priv, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return pemBlock(t, "PRIVATE KEY", der)
}

func ecSEC1PEM(t testing.TB) string {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalECPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return pemBlock(t, "EC PRIVATE KEY", der)
}

func keyFile(t testing.TB, pems ...string) string {
	p := filepath.Join(t.TempDir(), "signing-key.pem")
	if err := os.WriteFile(p, []byte(strings.Join(pems, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestHubTokenRoundTrip(t *testing.T) {
	clock := newFakeClock()
	a := newAuth(t, Config{HubURL: "https://tether.example.com", SigningKeyFile: keyFile(t, ed25519PEM(t)), TTL: 2 * time.Hour, Now: clock.Now})
	alice := Person{Name: "alice@example.com", Groups: []string{"platform", "dev"}, Source: SourceOIDC, Bearer: "id-token"}
	tok, exp, err := a.IssueToken(alice)
	if err != nil {
		t.Fatal(err)
	}
	if want := clock.Now().Add(2 * time.Hour); !exp.Equal(want) {
		t.Errorf("expires %s, want %s", exp, want)
	}
	if strings.Contains(tok, "id-token") {
		t.Error("the hub token carries the person's own bearer token")
	}
	p, ok, err := a.Authenticate(bearer(tok))
	if err != nil || !ok {
		t.Fatalf("Authenticate: %v, %v", ok, err)
	}
	want := Person{Name: alice.Name, Groups: alice.Groups, Source: SourceHub}
	if p.Name != want.Name || !slices.Equal(p.Groups, want.Groups) || p.Source != want.Source || p.Bearer != "" {
		t.Errorf("got %+v, want %+v", p, want)
	}
	// The claims are what the package doc says.
	var claims map[string]any
	payload, _ := base64.RawURLEncoding.DecodeString(strings.Split(tok, ".")[1])
	if err := json.Unmarshal(payload, &claims); err != nil {
		t.Fatal(err)
	}
	if claims["iss"] != "tether-hub" || claims["aud"] != "https://tether.example.com" || claims["sub"] != alice.Name {
		t.Errorf("claims = %v", claims)
	}
	// A person with no groups round-trips too.
	tok, _, err = a.IssueToken(Person{Name: "bob", Source: SourceProxy})
	if err != nil {
		t.Fatal(err)
	}
	if p, ok, err := a.Authenticate(bearer(tok)); !ok || err != nil || p.Name != "bob" || len(p.Groups) != 0 {
		t.Errorf("bob: %+v %v %v", p, ok, err)
	}
}

func TestHubTokenExpiry(t *testing.T) {
	clock := newFakeClock()
	a := newAuth(t, Config{TTL: time.Hour, Now: clock.Now})
	tok, exp, err := a.IssueToken(Person{Name: "alice", Source: SourceProxy})
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour) // at the expiry itself
	if _, ok, err := a.Authenticate(bearer(tok)); !ok || err != nil {
		t.Fatalf("at expiry: %v %v", ok, err)
	}
	// A single hub signs and checks on one clock: no leeway past the expiry
	// (issue 33; it was a minute).
	clock.Advance(time.Second)
	_, ok, err := a.Authenticate(bearer(tok))
	if ok || !errors.Is(err, ErrExpired) {
		t.Fatalf("after expiry: %v %v", ok, err)
	}
	want := `expired bearer token: a hub-issued token for "alice" that expired at ` + exp.UTC().Format(time.RFC3339) + `; get a new kubeconfig`
	if err.Error() != want {
		t.Errorf("error:\n got %s\nwant %s", err, want)
	}
}

// TestHubTokenLeewayForReplicas: replicas whose clocks disagree by a few
// seconds take each other's tokens that long past their expiry, when given
// the leeway, and no longer; more than 5 s is refused at start.
func TestHubTokenLeewayForReplicas(t *testing.T) {
	clock := newFakeClock()
	a := newAuth(t, Config{TTL: time.Hour, HubTokenLeeway: 5 * time.Second, Now: clock.Now})
	tok, _, err := a.IssueToken(Person{Name: "alice", Source: SourceProxy})
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour + 5*time.Second)
	if _, ok, err := a.Authenticate(bearer(tok)); !ok || err != nil {
		t.Fatalf("within the leeway: %v %v", ok, err)
	}
	clock.Advance(time.Second)
	if _, ok, err := a.Authenticate(bearer(tok)); ok || !errors.Is(err, ErrExpired) {
		t.Fatalf("past the leeway: %v %v", ok, err)
	}
	for _, d := range []time.Duration{-time.Second, 6 * time.Second, time.Minute} {
		if _, err := New(Config{HubTokenLeeway: d}); err == nil {
			t.Errorf("a leeway of %s was taken", d)
		}
	}
}

// TestNoTokenFromATokenInItsLeeway: a hub-issued token taken within the
// leeway after its expiry makes no session or kubeconfig token, which would
// expire with it, before it was made: the browser dropped such a cookie
// at once, and the person saw the sign-in form again with no word.
func TestNoTokenFromATokenInItsLeeway(t *testing.T) {
	clock := newFakeClock()
	a := newAuth(t, Config{TTL: time.Hour, HubTokenLeeway: maxHubLeeway, Now: clock.Now})
	kube, _, err := a.IssueToken(Person{Name: "alice", Source: SourceProxy})
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour + 3*time.Second)
	p, ok, err := a.Authenticate(bearer(kube))
	if !ok || err != nil {
		t.Fatalf("within the leeway: %v %v", ok, err)
	}
	if _, exp, err := a.IssueSession(p); !errors.Is(err, ErrExpired) {
		t.Errorf("a session made from it: expires %s, %v; want ErrExpired", exp, err)
	}
	if _, exp, err := a.IssueToken(p); !errors.Is(err, ErrExpired) {
		t.Errorf("a kubeconfig's token made from it: expires %s, %v; want ErrExpired", exp, err)
	}
}

// TestHubTokenVerifiedOnce: a token's signature is checked once and the
// answer remembered, for the same person, without letting the token outlive
// its expiry (TestHubTokenExpiry) or the remembered tokens grow without
// bound.
func TestHubTokenVerifiedOnce(t *testing.T) {
	clock := newFakeClock()
	a := newAuth(t, Config{TTL: time.Hour, Now: clock.Now})
	tok, _, err := a.IssueToken(Person{Name: "alice", Groups: []string{"dev"}, Source: SourceProxy})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		p, ok, err := a.Authenticate(bearer(tok))
		if !ok || err != nil || p.Name != "alice" || !slices.Equal(p.Groups, []string{"dev"}) || p.Source != SourceHub {
			t.Fatalf("request %d: %+v %v %v", i, p, ok, err)
		}
		// A caller that appends to the groups must not change what the
		// next request with the token gets.
		_ = append(p.Groups, "tether:admin")
	}
	a.verified.mu.Lock()
	n := len(a.verified.m)
	a.verified.mu.Unlock()
	if n != 1 {
		t.Errorf("%d tokens remembered after three requests with one, want 1", n)
	}
	// The same claims under a signature that doesn't match are refused,
	// though their token is remembered.
	parts := strings.Split(tok, ".")
	forged := parts[0] + "." + parts[1] + "." + base64.RawURLEncoding.EncodeToString(make([]byte, ed25519.SignatureSize))
	if _, ok, err := a.Authenticate(bearer(forged)); ok || !errors.Is(err, ErrInvalidToken) {
		t.Errorf("a forged signature: %v %v", ok, err)
	}
	// At most maxVerified are remembered; the newest is among them.
	var last string
	for i := range maxVerified + 10 {
		last, _, _ = a.IssueToken(Person{Name: fmt.Sprintf("user-%d", i), Source: SourceProxy})
		if _, ok, err := a.Authenticate(bearer(last)); !ok || err != nil {
			t.Fatalf("token %d: %v %v", i, ok, err)
		}
	}
	a.verified.mu.Lock()
	n = len(a.verified.m)
	_, newest := a.verified.m[sha256.Sum256([]byte(last))]
	a.verified.mu.Unlock()
	if n > maxVerified || !newest {
		t.Errorf("%d tokens remembered (the newest among them: %v), want at most %d", n, newest, maxVerified)
	}
}

// BenchmarkHubToken compares checking a token's signature with finding it
// among those already checked.
func BenchmarkHubToken(b *testing.B) {
	a := newAuth(b, Config{TTL: time.Hour})
	tok, _, err := a.IssueToken(Person{Name: "alice", Groups: []string{"dev"}, Source: SourceProxy})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("check", func(b *testing.B) {
		for b.Loop() {
			if _, err := a.hub.check(tok, time.Now()); err != nil {
				b.Fatal(err)
			}
		}
	})
	if _, ok, err := a.Authenticate(bearer(tok)); !ok || err != nil {
		b.Fatal(err)
	}
	r := bearer(tok)
	b.Run("remembered", func(b *testing.B) {
		for b.Loop() {
			if _, ok, err := a.Authenticate(r); !ok || err != nil {
				b.Fatal(err)
			}
		}
	})
}

func TestHubTokenRefused(t *testing.T) {
	keyA, keyB := ed25519PEM(t), ed25519PEM(t)
	a := newAuth(t, Config{HubURL: "https://a.example.com", SigningKeyFile: keyFile(t, keyA)})
	other := newAuth(t, Config{HubURL: "https://a.example.com", SigningKeyFile: keyFile(t, keyB)})
	otherHub := newAuth(t, Config{HubURL: "https://b.example.com", SigningKeyFile: keyFile(t, keyA)})
	alice := Person{Name: "alice", Groups: []string{"dev"}, Source: SourceToken}
	good, _, err := a.IssueToken(alice)
	if err != nil {
		t.Fatal(err)
	}
	fromOther, _, _ := other.IssueToken(alice)
	fromOtherHub, _, _ := otherHub.IssueToken(alice)

	parts := strings.Split(good, ".")
	// Tampered payload: alice claims another group; the signature no longer matches.
	var claims map[string]any
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	_ = json.Unmarshal(payload, &claims)
	claims["groups"] = []string{"admins"}
	forged, _ := json.Marshal(claims)
	tamperedPayload := parts[0] + "." + base64.RawURLEncoding.EncodeToString(forged) + "." + parts[2]
	// Tampered signature: one byte flipped.
	sig, _ := base64.RawURLEncoding.DecodeString(parts[2])
	sig[0] ^= 1
	tamperedSig := parts[0] + "." + parts[1] + "." + base64.RawURLEncoding.EncodeToString(sig)
	// Another hub's key, but this hub's key ID: the signature must still fail.
	otherParts := strings.Split(fromOther, ".")
	wrongKeySameKID := parts[0] + "." + otherParts[1] + "." + otherParts[2]
	// alg none, with the hub's issuer.
	none := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + parts[1] + "."
	hs256 := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "." + parts[1] + ".c2ln"

	for _, tc := range []struct {
		name, token string
		want        string
	}{
		{"tampered payload", tamperedPayload, `invalid bearer token: a hub-issued token whose signature doesn't match the hub's key`},
		{"tampered signature", tamperedSig, `invalid bearer token: a hub-issued token whose signature doesn't match the hub's key`},
		{"wrong key", fromOther, `invalid bearer token: a hub-issued token signed with a key this hub doesn't have (did the hub restart without TETHER_TOKEN_SIGNING_KEY_FILE, or was its key replaced?); get a new kubeconfig`},
		{"wrong key, right key id", wrongKeySameKID, `invalid bearer token: a hub-issued token whose signature doesn't match the hub's key`},
		{"another hub", fromOtherHub, `invalid bearer token: a hub-issued token for "alice" meant for another hub ("https://b.example.com", and this hub is "https://a.example.com")`},
		{"alg none", none, `unknown bearer token: no users list is set (TETHER_USERS), and it is not a JWT`},
		{"alg HS256", hs256, `invalid bearer token: a hub-issued token that can't be read: unexpected signature algorithm "HS256"; expected ["EdDSA"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, ok, err := a.Authenticate(bearer(tc.token))
			if ok || err == nil {
				t.Fatalf("accepted: %+v", p)
			}
			if !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("error:\n got %s\nwant %s", err, tc.want)
			}
		})
	}
}

func TestHubTokenKeyRotation(t *testing.T) {
	oldKey, newKey := ed25519PEM(t), ed25519PEM(t)
	before := newAuth(t, Config{SigningKeyFile: keyFile(t, oldKey)})
	during := newAuth(t, Config{SigningKeyFile: keyFile(t, newKey, oldKey)})
	after := newAuth(t, Config{SigningKeyFile: keyFile(t, newKey)})
	alice := Person{Name: "alice", Source: SourceProxy}
	oldTok, _, _ := before.IssueToken(alice)
	newTok, _, _ := during.IssueToken(alice)
	for _, tc := range []struct {
		a     *Authenticator
		token string
		ok    bool
	}{
		{during, oldTok, true}, {during, newTok, true}, {before, newTok, false}, {after, newTok, true}, {after, oldTok, false},
	} {
		if _, ok, _ := tc.a.Authenticate(bearer(tc.token)); ok != tc.ok {
			t.Errorf("ok = %v, want %v", ok, tc.ok)
		}
	}
}

// TestIssueTokenLimits: a hub token asked for with a hub token expires
// with it, so renewing one with itself never extends it; and no token is
// made for no one.
func TestIssueTokenLimits(t *testing.T) {
	log, buf := testLogger()
	clock := newFakeClock()
	a := newAuth(t, Config{Logger: log, Now: clock.Now})
	if !strings.Contains(buf.String(), "TETHER_TOKEN_SIGNING_KEY_FILE is not set") {
		t.Errorf("no warning about the key made at start: %s", buf)
	}
	tok, exp, err := a.IssueToken(Person{Name: "alice", Source: SourceProxy})
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour)
	p, _, _ := a.Authenticate(bearer(tok))
	renewed, renewedExp, err := a.IssueToken(p)
	if err != nil || !renewedExp.Equal(exp) {
		t.Errorf("renewing a hub token with itself, an hour on: expires %s (%v), want its own expiry %s", renewedExp, err, exp)
	}
	if q, ok, err := a.Authenticate(bearer(renewed)); !ok || err != nil || q.Name != "alice" {
		t.Errorf("the renewed token: %+v %v %v", q, ok, err)
	}
	if _, _, err := a.IssueToken(Person{Source: SourceProxy}); err == nil {
		t.Error("issued a token for no one")
	}
}

// A hub-issued token made for someone on the users list holds only while
// they are on it, with the list's groups: taking someone off the list
// revokes their kubeconfigs and page session at once.
func TestHubTokenHoldsWhileListed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "users.yaml")
	write := func(s string) { files.Replace(t, path, s) }
	alice := "- name: alice\n  token: " + tokAlice + "\n  groups: [dev]\n"
	bob := "- name: bob\n  token: " + tokBob + "\n"
	write(alice + bob)
	a := newAuth(t, Config{UsersFile: path, HubURL: "https://tether.example.com", SigningKeyFile: keyFile(t, ed25519PEM(t)),
		ProxyUserHeader: "X-Remote-User", ProxyTrusted: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
		Debounce: 10 * time.Millisecond, PollInterval: 50 * time.Millisecond})
	issue := func(r *http.Request) string {
		t.Helper()
		p, ok, err := a.Authenticate(r)
		if err != nil || !ok {
			t.Fatalf("sign in: %v %v", ok, err)
		}
		tok, _, err := a.IssueToken(p)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	fromList := issue(bearer(tokAlice))
	fromProxy := issue(request("127.0.0.1:1234", "X-Remote-User: alice"))
	groups := func(tok string) ([]string, error) {
		p, ok, err := a.Authenticate(bearer(tok))
		if err == nil && !ok {
			err = errors.New("not authenticated")
		}
		return p.Groups, err
	}
	for range 2 { // verified, then remembered
		if g, err := groups(fromList); err != nil || !slices.Equal(g, []string{"dev"}) {
			t.Fatalf("alice's hub token: groups %v, %v; want [dev]", g, err)
		}
	}
	// The list gives them: the token doesn't carry them, and a page
	// session's cookie stays small for someone in many groups.
	if payload, err := base64.RawURLEncoding.DecodeString(strings.Split(fromList, ".")[1]); err != nil || strings.Contains(string(payload), `"groups"`) {
		t.Errorf("the token of someone on the users list carries groups: %s %v", payload, err)
	}

	// Her groups change in the list: the token has the list's now.
	write(strings.Replace(alice, "[dev]", "[ops]", 1) + bob)
	waitFor(t, "alice's hub token to carry the list's new groups", func() bool {
		g, err := groups(fromList)
		return err == nil && slices.Equal(g, []string{"ops"})
	})

	// She leaves the list: her token is refused, and says why.
	write(bob)
	waitFor(t, "alice's hub token to be refused", func() bool { _, err := groups(fromList); return err != nil })
	if _, err := groups(fromList); !errors.Is(err, ErrInvalidToken) || !strings.Contains(err.Error(), `a hub-issued token for "alice", who is no longer in the users list`) {
		t.Errorf("refused with %v", err)
	}
	// A token made for someone the auth proxy named has no list to leave.
	if _, err := groups(fromProxy); err != nil {
		t.Errorf("a hub token made through the auth proxy: %v", err)
	}
}

// A hub-issued token made with a static token holds only while the users
// list still has that static token for the person: replacing a leaked
// token ends the kubeconfigs and sessions made with it, while both tokens
// of a rotation in progress keep theirs.
func TestHubTokenHoldsWhileItsTokenIsListed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "users.yaml")
	write := func(s string) { files.Replace(t, path, s) }
	newTok := strings.Repeat("n", 40)
	hash := func(tok string) string { return listfile.HashToken(tok).String() }
	write("- name: alice\n  token: " + tokAlice + "\n")
	a := newAuth(t, Config{UsersFile: path, HubURL: "https://tether.example.com", SigningKeyFile: keyFile(t, ed25519PEM(t)),
		Debounce: 10 * time.Millisecond, PollInterval: 50 * time.Millisecond})
	p, ok, err := a.Authenticate(bearer(tokAlice))
	if err != nil || !ok {
		t.Fatalf("sign in: %v %v", ok, err)
	}
	minted, _, err := a.IssueToken(p)
	if err != nil {
		t.Fatal(err)
	}
	works := func() error {
		_, ok, err := a.Authenticate(bearer(minted))
		if err == nil && !ok {
			err = errors.New("not authenticated")
		}
		return err
	}
	if err := works(); err != nil {
		t.Fatalf("the minted token: %v", err)
	}
	// A rotation: both tokens listed, the minted token holds.
	write("- name: alice\n  tokenSha256: [" + hash(tokAlice) + ", " + hash(newTok) + "]\n")
	waitFor(t, "the new token listed", func() bool { _, ok, _ := a.Authenticate(bearer(newTok)); return ok })
	if err := works(); err != nil {
		t.Errorf("the minted token while both are listed: %v", err)
	}
	// The old token is gone: so is what was made with it.
	write("- name: alice\n  tokenSha256: " + hash(newTok) + "\n")
	waitFor(t, "the minted token refused", func() bool { return works() != nil })
	if err := works(); !errors.Is(err, ErrInvalidToken) || !strings.Contains(err.Error(), "made with a token the users list no longer has") {
		t.Errorf("refused with %v", err)
	}
}
