package auth

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestSignOutEndsSessions: signing out voids the person's page sessions made
// until then, even those the hub had verified and remembered, and nothing
// else: not their kubeconfigs (one downloaded in the session included), not
// someone else's session, not a session made afterwards.
func TestSignOutEndsSessions(t *testing.T) {
	clock := newFakeClock()
	a := newAuth(t, Config{Users: "- name: alice\n  token: " + tokAlice + "\n- name: bob\n  token: " + tokBob + "\n", TTL: 2 * time.Hour, Now: clock.Now})
	person := func(tok string) Person {
		t.Helper()
		p, ok, err := a.Authenticate(bearer(tok))
		if !ok || err != nil {
			t.Fatalf("Authenticate: %v %v", ok, err)
		}
		return p
	}
	alice, bob := person(tokAlice), person(tokBob)
	session := func(p Person) string {
		t.Helper()
		tok, _, err := a.IssueSession(p)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	aliceSession, aliceOther, bobSession := session(alice), session(alice), session(bob)
	kubeconfig, _, err := a.IssueToken(alice)
	if err != nil {
		t.Fatal(err)
	}
	inSession := person(aliceSession) // verified now, and remembered
	fromSession, _, err := a.IssueToken(inSession)
	if err != nil {
		t.Fatalf("a kubeconfig for a page session: %v", err)
	}
	person(fromSession)

	clock.Advance(time.Second)
	a.EndSessions(inSession)
	for name, tok := range map[string]string{"the session signed out": aliceSession, "her session in another browser": aliceOther} {
		_, ok, err := a.Authenticate(bearer(tok))
		if ok || !errors.Is(err, ErrInvalidToken) || !strings.Contains(err.Error(), `page session of "alice" that was signed out`) {
			t.Errorf("%s, after she signed out: %v %v", name, ok, err)
		}
	}
	for name, tok := range map[string]string{"her kubeconfig": kubeconfig, "the kubeconfig she got in the session": fromSession, "bob's session": bobSession} {
		if _, ok, err := a.Authenticate(bearer(tok)); !ok || err != nil {
			t.Errorf("%s, after alice signed out: %v %v", name, ok, err)
		}
	}
	// Signing in again at the same instant (as a fast hand may, within the
	// second a JWT's times are written in) gives a session that holds.
	again := session(alice)
	if _, ok, err := a.Authenticate(bearer(again)); !ok || err != nil {
		t.Errorf("a session made after she signed out: %v %v", ok, err)
	}
	// Tokens that are not sessions sign no one out.
	a.EndSessions(person(kubeconfig))
	a.EndSessions(alice)
	if _, ok, err := a.Authenticate(bearer(again)); !ok || err != nil {
		t.Errorf("her new session, after EndSessions for her kubeconfig and her static token: %v %v", ok, err)
	}
}

// TestSessionsExpireWithTheirSource: no token made from another outlives
// it. A session made from a kubeconfig's token (typed into the sign-in form),
// a kubeconfig made with a kubeconfig's token, and a kubeconfig made in a
// session expire with the token they came from.
func TestSessionsExpireWithTheirSource(t *testing.T) {
	clock := newFakeClock()
	a := newAuth(t, Config{Users: "- name: alice\n  token: " + tokAlice + "\n  groups: [dev]\n", TTL: 2 * time.Hour, Now: clock.Now})
	alice, _, _ := a.Authenticate(bearer(tokAlice))
	kubeconfig, kubeconfigExp, err := a.IssueToken(alice)
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(30 * time.Minute)
	fromKubeconfig, _, _ := a.Authenticate(bearer(kubeconfig))
	if _, exp, err := a.IssueToken(fromKubeconfig); err != nil || !exp.Equal(kubeconfigExp) {
		t.Errorf("a kubeconfig made with a kubeconfig's token expires %s (%v), want %s", exp, err, kubeconfigExp)
	}
	session, sessionExp, err := a.IssueSession(fromKubeconfig)
	if err != nil || !sessionExp.Equal(kubeconfigExp) {
		t.Fatalf("a session from a kubeconfig's token expires %s (%v), want %s", sessionExp, err, kubeconfigExp)
	}
	fresh, freshExp, _ := a.IssueSession(alice)
	clock.Advance(30 * time.Minute)
	inSession, _, _ := a.Authenticate(bearer(fresh))
	_, exp, err := a.IssueToken(inSession)
	if err != nil || !exp.Equal(freshExp) {
		t.Errorf("a kubeconfig from a session expires %s (%v), want the session's %s", exp, err, freshExp)
	}
	// Made from a token made for someone on the users list, it holds to the
	// list as that token does, with the list's groups.
	p, ok, err := a.Authenticate(bearer(session))
	if !ok || err != nil || len(p.Groups) != 1 || p.Groups[0] != "dev" {
		t.Errorf("the session from her kubeconfig: %+v %v %v", p, ok, err)
	}
	clock.Advance(time.Hour + maxHubLeeway + time.Second)
	if _, ok, err := a.Authenticate(bearer(session)); ok || !errors.Is(err, ErrExpired) {
		t.Errorf("the session, after the kubeconfig it came from expired: %v %v", ok, err)
	}
}

// TestSignOutMarksAreSwept: a mark is kept only while a session it voids
// could still be valid, so what it holds stays bounded by the people who
// signed out within a TTL.
func TestSignOutMarksAreSwept(t *testing.T) {
	clock := newFakeClock()
	a := newAuth(t, Config{TTL: time.Hour, Now: clock.Now})
	signOut := func(name string) {
		tok, _, err := a.IssueSession(Person{Name: name, Source: SourceProxy})
		if err != nil {
			t.Fatal(err)
		}
		p, _, _ := a.Authenticate(bearer(tok))
		a.EndSessions(p)
	}
	for i := range 1000 {
		signOut(fmt.Sprint("early-", i))
	}
	clock.Advance(time.Hour + maxHubLeeway + time.Second)
	for i := range 1000 {
		signOut(fmt.Sprint("late-", i))
	}
	a.signedOut.mu.Lock()
	n := len(a.signedOut.m)
	a.signedOut.mu.Unlock()
	// The sweeps run as the map doubles: the late marks stay, and of the
	// early ones, at most those marked since the last sweep that found them.
	if n < 1000 || n > 1200 {
		t.Errorf("%d marks held, want the 1,000 that still matter and few more", n)
	}
}
