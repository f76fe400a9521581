// Package oidctest runs an OpenID Connect issuer for tests: an HTTPS server on 127.0.0.1 that
// serves discovery (/.well-known/openid-configuration) and its keys (/keys), and signs ID tokens
// with whatever claims a test chooses. It exists so the hub's OIDC code is tested against real
// discovery, real TLS and real signatures rather than a mock of the verifier, and so tests can
// make every kind of bad token a real issuer might hand out: signed by another key, for another
// issuer or audience, expired, not yet valid.
//
// The issuer is meant to grow: endpoints for the browser sign-in (authorization code with PKCE)
// go on the same mux, through Handle, and into the discovery document.
package oidctest

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// DefaultClientID is the audience tokens carry unless Options or Token say otherwise.
const DefaultClientID = "tether"

// Options tune Start. The zero value is ready to use.
type Options struct {
	// ClientID is the audience tokens carry by default; "" means DefaultClientID.
	ClientID string
	// Now is the issuer's clock, for iat and the default exp; nil means time.Now.
	Now func() time.Time
	// Issuer, when set, is what discovery and tokens name as the issuer instead of the server's
	// own URL: a way to serve a discovery document whose issuer doesn't match.
	Issuer string
}

// Issuer is a running test issuer. Its methods are safe for concurrent use.
type Issuer struct {
	// URL is the issuer's URL, https://127.0.0.1:<port>, without a trailing slash.
	URL string
	// ClientID is the default audience of the tokens it signs.
	ClientID string

	srv      *httptest.Server
	mux      *http.ServeMux
	now      func() time.Time
	issuerID string // what discovery and tokens say the issuer is

	mu           sync.Mutex // guards the following
	keys         []*Key     // published in /keys; keys[0] signs by default
	codes        map[string]signIn
	signInT      testing.TB
	signInClaims map[string]any
	down         bool
	requests     map[string]int // by path
}

// Start runs an issuer until the test ends (or Close).
func Start(t testing.TB, opts Options) *Issuer {
	t.Helper()
	i := &Issuer{
		ClientID: opts.ClientID,
		mux:      http.NewServeMux(),
		now:      opts.Now,
		keys:     []*Key{NewKey(t)},
		requests: map[string]int{},
	}
	if i.ClientID == "" {
		i.ClientID = DefaultClientID
	}
	if i.now == nil {
		i.now = time.Now
	}
	i.mux.HandleFunc("GET /.well-known/openid-configuration", i.serveDiscovery)
	i.mux.HandleFunc("GET /keys", i.serveKeys)
	i.mux.HandleFunc("GET /authorize", i.serveAuthorize)
	i.mux.HandleFunc("POST /token", i.serveToken)
	i.srv = httptest.NewUnstartedServer(http.HandlerFunc(i.serve))
	// Clients that don't trust the certificate are part of the tests, not news.
	i.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	i.srv.StartTLS()
	i.URL = i.srv.URL
	i.issuerID = opts.Issuer
	if i.issuerID == "" {
		i.issuerID = i.URL
	}
	t.Cleanup(i.Close)
	return i
}

// Close stops the server and waits for its connections to end. It may be called twice.
func (i *Issuer) Close() {
	i.srv.CloseClientConnections()
	i.srv.Close()
}

// Handle adds an endpoint to the issuer's server, as http.ServeMux.Handle does.
func (i *Issuer) Handle(pattern string, h http.Handler) { i.mux.Handle(pattern, h) }

// SetDown makes the issuer answer every request with 503 (true) or serve again (false), as an
// issuer does while it is being restarted.
func (i *Issuer) SetDown(down bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.down = down
}

// Requests returns how many requests reached path (like "/.well-known/openid-configuration"
// or "/keys"), including those answered 503.
func (i *Issuer) Requests(path string) int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.requests[path]
}

func (i *Issuer) serve(w http.ResponseWriter, r *http.Request) {
	i.mu.Lock()
	i.requests[r.URL.Path]++
	down := i.down
	i.mu.Unlock()
	if down {
		http.Error(w, "the issuer is down", http.StatusServiceUnavailable)
		return
	}
	i.mux.ServeHTTP(w, r)
}

func (i *Issuer) serveDiscovery(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, map[string]any{
		"issuer":                                i.issuerID,
		"jwks_uri":                              i.URL + "/keys",
		"authorization_endpoint":                i.URL + "/authorize",
		"token_endpoint":                        i.URL + "/token",
		"id_token_signing_alg_values_supported": []string{string(jose.RS256)},
		"response_types_supported":              []string{"id_token", "code"},
		"subject_types_supported":               []string{"public"},
	})
}

func (i *Issuer) serveKeys(w http.ResponseWriter, _ *http.Request) {
	i.mu.Lock()
	set := jose.JSONWebKeySet{}
	for _, k := range i.keys {
		set.Keys = append(set.Keys, k.public())
	}
	i.mu.Unlock()
	writeJSON(w, set)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// CAPEM returns the PEM of the certificate the issuer serves, which is its own CA.
func (i *Issuer) CAPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: i.srv.Certificate().Raw})
}

// CAFile writes CAPEM to a file in the test's temporary directory and returns its path.
func (i *Issuer) CAFile(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "oidc-ca.pem")
	if err := os.WriteFile(path, i.CAPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Client returns an HTTP client that trusts the issuer's certificate.
func (i *Issuer) Client() *http.Client {
	pool := x509.NewCertPool()
	pool.AddCert(i.srv.Certificate())
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

// Key is a signing key: RSA, for RS256, the algorithm every issuer supports.
type Key struct {
	ID     string
	signer crypto.Signer
}

// NewKey makes a key. Give it to Token.Key to sign a token with a key the issuer doesn't publish.
func NewKey(t testing.TB) *Key {
	t.Helper()
	priv, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	return &Key{ID: base64.RawURLEncoding.EncodeToString(id[:]), signer: priv}
}

func (k *Key) public() jose.JSONWebKey {
	return jose.JSONWebKey{Key: k.signer.Public(), KeyID: k.ID, Algorithm: string(jose.RS256), Use: "sig"}
}

// SigningKey returns the key tokens are signed with by default.
func (i *Issuer) SigningKey() *Key {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.keys[0]
}

// RotateKey makes a new key, publishes it and signs with it from now on. The old key stays
// published, as issuers keep it until the tokens it signed have expired.
func (i *Issuer) RotateKey(t testing.TB) *Key {
	k := NewKey(t)
	i.mu.Lock()
	defer i.mu.Unlock()
	i.keys = append([]*Key{k}, i.keys...)
	return k
}

// Token describes an ID token to sign. Zero fields take the issuer's defaults, so a test sets
// only what it is about.
type Token struct {
	// Issuer is the iss claim; "" means the issuer's own.
	Issuer string
	// Audience is the aud claim; nil means the issuer's ClientID.
	Audience []string
	// Subject is the sub claim; "" means "user-1".
	Subject string
	// IssuedAt is the iat claim; zero means the issuer's now.
	IssuedAt time.Time
	// Expiry is the exp claim; zero means an hour after IssuedAt.
	Expiry time.Time
	// NotBefore is the nbf claim; zero leaves it out.
	NotBefore time.Time
	// Claims are the other claims: email, email_verified, groups and whatever else.
	Claims map[string]any
	// Key signs the token; nil means the issuer's signing key.
	Key *Key
	// KeyID, when set, is the kid header instead of Key's own ID: a token that names a
	// published key but is signed by another.
	KeyID string
}

// Sign returns the token as a compact JWT.
func (i *Issuer) Sign(t testing.TB, tok Token) string {
	t.Helper()
	if tok.Issuer == "" {
		tok.Issuer = i.issuerID
	}
	if tok.Audience == nil {
		tok.Audience = []string{i.ClientID}
	}
	if tok.Subject == "" {
		tok.Subject = "user-1"
	}
	if tok.IssuedAt.IsZero() {
		tok.IssuedAt = i.now()
	}
	if tok.Expiry.IsZero() {
		tok.Expiry = tok.IssuedAt.Add(time.Hour)
	}
	if tok.Key == nil {
		tok.Key = i.SigningKey()
	}
	kid := tok.Key.ID
	if tok.KeyID != "" {
		kid = tok.KeyID
	}
	signer, err := jose.NewSigner(jose.SigningKey{
		Algorithm: jose.RS256,
		Key:       jose.JSONWebKey{Key: tok.Key.signer, KeyID: kid},
	}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	std := jwt.Claims{
		Issuer:   tok.Issuer,
		Subject:  tok.Subject,
		Audience: jwt.Audience(tok.Audience),
		IssuedAt: jwt.NewNumericDate(tok.IssuedAt),
		Expiry:   jwt.NewNumericDate(tok.Expiry),
	}
	if !tok.NotBefore.IsZero() {
		std.NotBefore = jwt.NewNumericDate(tok.NotBefore)
	}
	b := jwt.Signed(signer).Claims(std)
	if len(tok.Claims) > 0 {
		b = b.Claims(tok.Claims)
	}
	raw, err := b.Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// IDToken signs a token with the issuer's defaults and claims, like
// IDToken(t, map[string]any{"email": "alice@example.com", "email_verified": true}).
func (i *Issuer) IDToken(t testing.TB, claims map[string]any) string {
	t.Helper()
	return i.Sign(t, Token{Claims: claims})
}
