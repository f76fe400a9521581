package auth

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/testutil/files"
	"github.com/tetherhq/tether/internal/testutil/oidctest"
)

// mustAuth authenticates a bearer token that must be accepted.
func mustAuth(t *testing.T, a *Authenticator, token string) Person {
	t.Helper()
	p, ok, err := a.Authenticate(bearer(token))
	if !ok || err != nil {
		t.Fatalf("Authenticate: %v, %v", ok, err)
	}
	return p
}

// TestRecheck: a person authenticated earlier is refused once the users
// list drops them or replaces their token, once their page session is
// signed out, and once their credential expires; the list's new groups
// are theirs; and OnUsersChanged tells of each reload.
func TestRecheck(t *testing.T) {
	path := filepath.Join(t.TempDir(), "users.yaml")
	files.Replace(t, path, "- name: alice\n  token: "+tokAlice+"\n- name: bob\n  token: "+tokBob+"\n")
	clock := &fakeClock{t: time.Now()}
	a := newAuth(t, Config{UsersFile: path, Debounce: 10 * time.Millisecond, PollInterval: 50 * time.Millisecond, TTL: time.Hour, Now: clock.Now})
	reloads := make(chan struct{}, 10)
	stop := a.OnUsersChanged(func() { reloads <- struct{}{} })
	defer stop()

	alice, bob := mustAuth(t, a, tokAlice), mustAuth(t, a, tokBob)
	kubeconfig, _, err := a.IssueToken(bob)
	if err != nil {
		t.Fatal(err)
	}
	bobHub := mustAuth(t, a, kubeconfig)
	sessionToken, _, err := a.IssueSession(alice)
	if err != nil {
		t.Fatal(err)
	}
	aliceSession := mustAuth(t, a, sessionToken)
	for _, p := range []Person{alice, bob, bobHub, aliceSession} {
		if _, err := a.Recheck(p); err != nil {
			t.Fatalf("%v refused before anything changed: %v", p, err)
		}
	}

	clock.Advance(time.Millisecond)
	a.EndSessions(aliceSession)
	if _, err := a.Recheck(aliceSession); !errors.Is(err, ErrInvalidToken) {
		t.Errorf("a session signed out: %v", err)
	}
	if _, err := a.Recheck(alice); err != nil {
		t.Errorf("alice's static token after her page session was signed out: %v", err)
	}

	// Alice leaves, and bob gets a group.
	files.Replace(t, path, "- name: bob\n  token: "+tokBob+"\n  groups: [ops]\n")
	select {
	case <-reloads:
	case <-time.After(5 * time.Second):
		t.Fatal("OnUsersChanged not called on a reload")
	}
	if _, err := a.Recheck(alice); !errors.Is(err, ErrInvalidToken) {
		t.Errorf("alice off the list: %v", err)
	}
	for _, p := range []Person{bob, bobHub} {
		if got, err := a.Recheck(p); err != nil || len(got.Groups) != 1 || got.Groups[0] != "ops" {
			t.Errorf("bob (%s) with a new group: %v, %v", p.Source, got.Groups, err)
		}
	}

	// Bob's token is replaced: his kubeconfig, made with the old one, goes too.
	files.Replace(t, path, "- name: bob\n  token: "+tokBob2+"\n")
	<-reloads
	for _, p := range []Person{bob, bobHub} {
		if _, err := a.Recheck(p); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("bob (%s) after his token was replaced: %v", p.Source, err)
		}
	}

	// Expiry.
	bob2 := mustAuth(t, a, tokBob2)
	token, exp, err := a.IssueToken(bob2)
	if err != nil {
		t.Fatal(err)
	}
	p := mustAuth(t, a, token)
	if !p.Expires().Equal(exp) {
		t.Errorf("Expires %v, want %v", p.Expires(), exp)
	}
	clock.Advance(time.Hour)
	if _, err := a.Recheck(p); !errors.Is(err, ErrExpired) {
		t.Errorf("a token at its expiry: %v", err)
	}
	if !bob2.Expires().IsZero() {
		t.Errorf("a static token expires at %v", bob2.Expires())
	}
}

// TestRecheckOIDC: an OIDC person's credential expires with their ID
// token, and Recheck refuses them from then on.
func TestRecheckOIDC(t *testing.T) {
	clock := newFakeClock()
	iss, a := oidcAuth(t, oidctest.Options{Now: clock.Now}, Config{Now: clock.Now})
	exp := clock.Now().Add(10 * time.Minute).Truncate(time.Second)
	p := mustAuth(t, a, iss.Sign(t, oidctest.Token{Claims: verified, Expiry: exp}))
	if !p.Expires().Equal(exp) {
		t.Fatalf("Expires %v, want the token's %v", p.Expires(), exp)
	}
	if _, err := a.Recheck(p); err != nil {
		t.Fatalf("before its expiry: %v", err)
	}
	clock.Advance(10 * time.Minute)
	if _, err := a.Recheck(p); !errors.Is(err, ErrExpired) {
		t.Errorf("at its expiry: %v", err)
	}
}
