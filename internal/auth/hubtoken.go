package auth

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// hubIssuer is the iss of every hub-issued token. It is not a URL, so no OIDC issuer (whose iss
// must be an https URL, TETHER_OIDC_ISSUER) can ever have it: an ID token can't pass as a hub
// token, and a hub token is never sent to the OIDC verifier.
const hubIssuer = "tether-hub"

// maxHubLeeway bounds Config.HubTokenLeeway: a few seconds of disagreement between replicas'
// clocks, never minutes of use past a token's expiry (issue 33).
const maxHubLeeway = 5 * time.Second

// hubTokens signs and checks the tokens in the kubeconfigs the hub hands out: JWTs signed with
// Ed25519 (EdDSA), naming the person in sub and their groups in groups.
type hubTokens struct {
	signer   jose.Signer
	keys     map[string]ed25519.PublicKey // by key ID
	audience string
	ttl      time.Duration
	// leeway is Config.HubTokenLeeway: how long past its expiry a token is
	// still taken. Zero for a single hub, which signs and checks on one clock.
	leeway time.Duration
	now    func() time.Time
	// seals are the keys Seal and Open use, one per signing key, the
	// first sealing (seal.go).
	seals [][]byte
}

type hubClaims struct {
	Groups []string `json:"groups,omitempty"`
	// From is how the person signed in when the token was issued:
	// SourceToken, SourceOIDC or SourceProxy. A token issued to someone on
	// the users list holds only while they are on it.
	From string `json:"from,omitempty"`
	// Cred names the static token it was made with, for SourceToken
	// (Person.cred).
	Cred string `json:"cred,omitempty"`
	// Session is set in a page session's token (IssueSession): when it was
	// made, in Unix nanoseconds, so that a sign-out voids the sessions made
	// before it, even in the same second (EndSessions).
	Session int64 `json:"ses,omitempty"`
}

func newHubTokens(cfg Config, log *slog.Logger) (*hubTokens, error) {
	var privs []ed25519.PrivateKey
	if cfg.SigningKeyFile != "" {
		var err error
		if privs, err = ReadSigningKeys(cfg.SigningKeyFile); err != nil {
			return nil, err
		}
	} else {
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("make a signing key: %w", err)
		}
		privs = []ed25519.PrivateKey{priv}
		log.Warn("TETHER_TOKEN_SIGNING_KEY_FILE is not set, so the hub made a signing key that lasts until it stops: the kubeconfigs it hands out stop working when it restarts, and hub replicas don't accept each other's. Make a key with: openssl genpkey -algorithm ed25519 -out signing-key.pem")
	}
	h := &hubTokens{keys: map[string]ed25519.PublicKey{}, audience: cfg.HubURL, ttl: cfg.TTL, leeway: cfg.HubTokenLeeway, now: cfg.now}
	if h.audience == "" {
		h.audience = hubIssuer
	}
	if h.ttl == 0 {
		h.ttl = defaultKubeconfigTTL
	}
	for i, priv := range privs {
		pub := priv.Public().(ed25519.PublicKey)
		thumb, err := (&jose.JSONWebKey{Key: pub}).Thumbprint(crypto.SHA256)
		if err != nil {
			return nil, fmt.Errorf("key id: %w", err)
		}
		kid := base64.RawURLEncoding.EncodeToString(thumb)
		h.keys[kid] = pub
		seal, err := sealKey(priv)
		if err != nil {
			return nil, err
		}
		h.seals = append(h.seals, seal)
		if i > 0 {
			continue
		}
		h.signer, err = jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: jose.JSONWebKey{Key: priv, KeyID: kid}},
			(&jose.SignerOptions{}).WithType("JWT"))
		if err != nil {
			return nil, fmt.Errorf("signer: %w", err)
		}
	}
	return h, nil
}

// ReadSigningKeys reads TETHER_TOKEN_SIGNING_KEY_FILE: a PEM file of Ed25519 private keys in
// PKCS #8, the first of which signs and any of which verifies (so a key can be rotated). Hub
// replicas also sign their peer identities with it (internal/replicas).
func ReadSigningKeys(path string) ([]ed25519.PrivateKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s can't be read: %w", SettingSigningKeyFile, err)
	}
	const want = "must hold an Ed25519 private key in PEM, as openssl genpkey -algorithm ed25519 writes it"
	var keys []ed25519.PrivateKey
	for n := 1; ; n++ {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "PRIVATE KEY" {
			return nil, fmt.Errorf("%s %s; %s has a %q block (key %d)", SettingSigningKeyFile, want, path, block.Type, n)
		}
		k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s %s; key %d in %s is not a PKCS #8 private key", SettingSigningKeyFile, want, n, path)
		}
		priv, ok := k.(ed25519.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("%s %s; key %d in %s is %s", SettingSigningKeyFile, want, n, path, keyKind(k))
		}
		keys = append(keys, priv)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s %s; %s has no PEM block", SettingSigningKeyFile, want, path)
	}
	return keys, nil
}

func keyKind(k any) string {
	name := fmt.Sprintf("%T", k) // *rsa.PrivateKey, *ecdsa.PrivateKey, *ecdh.PrivateKey
	name = strings.TrimPrefix(name, "*")
	name, _, _ = strings.Cut(name, ".")
	return "an " + strings.ToUpper(name) + " key"
}

// IssueToken makes a hub-issued token for p, valid for the TTL (TETHER_KUBECONFIG_TTL), for
// the kubeconfigs of SPEC section 3. It carries p's name and groups, not its source or bearer
// token. For a person signed in with a hub-issued token (a page session's, a kubeconfig's) it
// expires with that token, and a page session's outlives a sign-out.
func (a *Authenticator) IssueToken(p Person) (token string, expires time.Time, err error) {
	return a.hub.issue(p, false)
}

// IssueSession makes the token a signed-in browser's session cookie holds: a hub-issued token
// like IssueToken's, that EndSessions voids. For a person signed in with a kubeconfig's token,
// it expires with that token.
func (a *Authenticator) IssueSession(p Person) (token string, expires time.Time, err error) {
	return a.hub.issue(p, true)
}

// EndSessions signs p out of the page: every session token made for p's name before now stops
// working, in every browser, on this hub, and on its other replicas once OnSignOut's hooks have
// told them. Kubeconfig tokens hold, even those downloaded in a session. It does nothing for a
// person who didn't sign in with a session token.
func (a *Authenticator) EndSessions(p Person) {
	if p.Source != SourceHub || p.session == 0 {
		return
	}
	now := a.cfg.now()
	// Any session made before now expires within a TTL of being made, so
	// the mark is needed no longer than that.
	until := now.Add(a.hub.ttl + a.hub.leeway)
	a.signedOut.mark(p.Name, now, until)
	for _, f := range a.signOutHooks.all() {
		f(p.Name, now, until)
	}
}

// issue makes a token for p: a session's when session is set. One made from a hub-issued token
// expires with it, and carries on how its person signed in and with which static token: no
// chain of tokens outlives the first, or the users list's say over it (stillHolds).
func (h *hubTokens) issue(p Person, session bool) (string, time.Time, error) {
	if p.Name == "" {
		return "", time.Time{}, errors.New("issue token: the person has no name")
	}
	now := h.now()
	exp, claims := now.Add(h.ttl), hubClaims{Groups: p.Groups, From: p.Source, Cred: p.cred}
	if p.Source == SourceHub {
		exp, claims.From = p.expires, p.from
		if !exp.After(now) {
			// Accepted within the leeway of its expiry, it would make a
			// token that has already expired: a cookie a browser drops at
			// once, a kubeconfig that doesn't work.
			return "", time.Time{}, fmt.Errorf("issue token: %w: the hub-issued token it would be made from expired at %s; get a new kubeconfig",
				ErrExpired, exp.UTC().Format(time.RFC3339))
		}
	}
	if claims.From == SourceToken {
		// The users list gives its people their groups when the token is
		// used (stillHolds): carried here, they would only make a page
		// session's cookie larger.
		claims.Groups = nil
	}
	if session {
		claims.Session = now.UnixNano()
	}
	std := jwt.Claims{
		Issuer:    hubIssuer,
		Subject:   p.Name,
		Audience:  jwt.Audience{h.audience},
		IssuedAt:  jwt.NewNumericDate(now),
		NotBefore: jwt.NewNumericDate(now),
		Expiry:    jwt.NewNumericDate(exp),
	}
	raw, err := jwt.Signed(h.signer).Claims(std).Claims(claims).Serialize()
	if err != nil {
		return "", time.Time{}, fmt.Errorf("issue token: %w", err)
	}
	return raw, std.Expiry.Time(), nil
}

// verify checks a token whose (unverified) issuer is the hub's, and says
// until when the answer holds: its expiry, with the leeway. The keys are
// fixed for the hub's life, so nothing else can change it.
func (h *hubTokens) verify(raw string) (Person, time.Time, error) {
	p, err := h.check(raw, h.now())
	if err != nil {
		return Person{}, time.Time{}, err
	}
	return p, p.expires.Add(h.leeway), nil
}

// check verifies raw's signature and claims at now, and returns whom it
// names, with when it expires.
func (h *hubTokens) check(raw string, now time.Time) (Person, error) {
	tok, err := jwt.ParseSigned(raw, []jose.SignatureAlgorithm{jose.EdDSA})
	if err != nil {
		return Person{}, fmt.Errorf("%w: a hub-issued token that can't be read: %v", ErrInvalidToken, err)
	}
	pub, ok := h.keys[tok.Headers[0].KeyID]
	if !ok {
		return Person{}, fmt.Errorf("%w: %w (did the hub restart without %s, or was its key replaced?); get a new kubeconfig", ErrInvalidToken, ErrOtherKey, SettingSigningKeyFile)
	}
	var std jwt.Claims
	var extra hubClaims
	if err := tok.Claims(pub, &std, &extra); err != nil {
		if errors.Is(err, jose.ErrCryptoFailure) {
			return Person{}, fmt.Errorf("%w: a hub-issued token whose signature doesn't match the hub's key", ErrInvalidToken)
		}
		return Person{}, fmt.Errorf("%w: a hub-issued token with claims the hub doesn't write", ErrInvalidToken)
	}
	if std.Expiry == nil || std.Subject == "" {
		return Person{}, fmt.Errorf("%w: a hub-issued token without an expiry or a name", ErrInvalidToken)
	}
	err = std.ValidateWithLeeway(jwt.Expected{Issuer: hubIssuer, AnyAudience: jwt.Audience{h.audience}, Time: now}, h.leeway)
	switch {
	case errors.Is(err, jwt.ErrExpired):
		return Person{}, fmt.Errorf("%w: a hub-issued token for %q that expired at %s; get a new kubeconfig", ErrExpired, std.Subject, std.Expiry.Time().UTC().Format(time.RFC3339))
	case errors.Is(err, jwt.ErrInvalidAudience):
		return Person{}, fmt.Errorf("%w: a hub-issued token for %q meant for another hub (%q, and this hub is %q)", ErrInvalidToken, std.Subject, short(strings.Join(std.Audience, ", ")), h.audience)
	case err != nil:
		return Person{}, fmt.Errorf("%w: a hub-issued token for %q: %v", ErrInvalidToken, std.Subject, err)
	}
	p := Person{Name: std.Subject, Groups: extra.Groups, Source: SourceHub, from: extra.From, cred: extra.Cred,
		session: extra.Session, expires: std.Expiry.Time()}
	return p, nil
}

// peekJWT reports whether token looks like a compact JWT (three base64url parts, the middle one
// a JSON object) and returns its claims, unverified: only to choose how to verify it.
func peekJWT(token string) (claims struct{ Issuer string }, ok bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 || parts[0] == "" || parts[2] == "" {
		return claims, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return claims, false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(payload, &m) != nil || m == nil {
		return claims, false
	}
	_ = json.Unmarshal(m["iss"], &claims.Issuer) // not text: no issuer
	return claims, true
}

// short cuts text from a token that may be anything before it goes into an error.
func short(s string) string { return cut(s, 100) }

// cut shortens s to at most max bytes, marking the cut. It cuts between
// characters, so a quoted value doesn't end in half of one.
func cut(s string, max int) string {
	if len(s) <= max {
		return s
	}
	for max > 0 && !utf8.RuneStart(s[max]) {
		max--
	}
	return s[:max] + "…"
}
