package auth

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"
)

// Browser sign-in with the OIDC issuer: the authorization-code flow with
// PKCE, as a public client (no client secret: SPEC names none), so nothing
// a browser carries can be replayed without the verifier only the hub has.

// ErrNoOIDC is returned by the sign-in methods when no issuer is set.
var ErrNoOIDC = errors.New("auth: no OIDC issuer is configured")

// OIDCEnabled reports whether people can sign in with the OIDC issuer.
func (a *Authenticator) OIDCEnabled() bool { return a.oidc != nil }

func (a *Authenticator) oauth2Config(ctx context.Context, redirectURL string) (*oauth2.Config, error) {
	if a.oidc == nil {
		return nil, ErrNoOIDC
	}
	if _, err := a.oidc.getVerifier(ctx); err != nil { // discovers the issuer if need be
		return nil, err
	}
	a.oidc.mu.Lock()
	ep := a.oidc.endpoint
	a.oidc.mu.Unlock()
	return &oauth2.Config{
		ClientID:    a.oidc.cfg.ClientID,
		Endpoint:    ep,
		RedirectURL: redirectURL,
		Scopes:      []string{oidc.ScopeOpenID, "email", "profile", "groups"},
	}, nil
}

// OIDCAuthCodeURL returns where to send a browser to sign in. state, nonce
// and verifier are the hub's fresh random secrets for this sign-in.
func (a *Authenticator) OIDCAuthCodeURL(ctx context.Context, redirectURL, state, nonce, verifier string) (string, error) {
	conf, err := a.oauth2Config(ctx, redirectURL)
	if err != nil {
		return "", err
	}
	return conf.AuthCodeURL(state, oidc.Nonce(nonce), oauth2.S256ChallengeOption(verifier)), nil
}

// OIDCExchange trades the issuer's code for an ID token, checks it as a
// bearer ID token is checked and that it carries nonce, and returns who
// signed in.
func (a *Authenticator) OIDCExchange(ctx context.Context, redirectURL, code, verifier, nonce string) (Person, error) {
	conf, err := a.oauth2Config(ctx, redirectURL)
	if err != nil {
		return Person{}, err
	}
	tok, err := conf.Exchange(context.WithValue(ctx, oauth2.HTTPClient, a.oidc.client), code, oauth2.VerifierOption(verifier))
	if err != nil {
		return Person{}, fmt.Errorf("%w: the issuer refused the sign-in code: %v", ErrInvalidToken, err)
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return Person{}, fmt.Errorf("%w: the issuer's answer has no id_token", ErrInvalidToken)
	}
	p, _, err := a.oidc.verify(ctx, raw)
	if err != nil {
		return Person{}, err
	}
	if tokenNonce(raw) != nonce {
		return Person{}, fmt.Errorf("%w: the ID token is not the one this sign-in asked for (nonce)", ErrInvalidToken)
	}
	if err := checkPerson(p); err != nil {
		return Person{}, err
	}
	return p, nil
}

// tokenNonce reads the nonce claim of a JWT whose signature was already
// checked.
func tokenNonce(raw string) string {
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		return ""
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return ""
	}
	var c struct {
		Nonce string `json:"nonce"`
	}
	json.Unmarshal(payload, &c)
	return c.Nonce
}
