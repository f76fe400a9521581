package auth

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tetherhq/tether/internal/listfile"
)

// Errors Authenticate wraps, so the caller can tell them apart with errors.Is. Each error's text
// says more, for the log; none contains a token.
var (
	// ErrMalformed: an Authorization header that isn't one bearer token, or an auth proxy that
	// sent its user header twice.
	ErrMalformed = errors.New("malformed credentials")
	// ErrUnknownToken: a bearer token that is not in the users list and is not a JWT.
	ErrUnknownToken = errors.New("unknown bearer token")
	// ErrInvalidToken: a JWT that is neither a valid hub-issued token nor a valid OIDC ID token.
	ErrInvalidToken = errors.New("invalid bearer token")
	// ErrExpired: a hub-issued token or OIDC ID token that has expired.
	ErrExpired = errors.New("expired bearer token")
	// ErrOtherKey is a hub-issued token signed with a key the hub doesn't
	// have: it restarted with a new one, or its key was replaced. Also
	// ErrInvalidToken.
	ErrOtherKey = errors.New("a hub-issued token signed with a key this hub doesn't have")
	// ErrOIDCUnavailable: an OIDC ID token that can't be checked because the issuer hasn't
	// answered discovery yet. The hub may answer 503 rather than 401.
	ErrOIDCUnavailable = errors.New("the OIDC issuer can't be reached")
)

// Sources, as Person.Source names them in audit lines.
const (
	SourceToken = "token" // the users list
	SourceOIDC  = "oidc"
	SourceHub   = "hub"
	SourceProxy = "proxy"
)

// maxTokenBytes bounds the bearer tokens read: ID tokens with many groups run to a few KiB, and
// nothing bigger is worth parsing.
const maxTokenBytes = 64 << 10

// Person is who a request is from.
type Person struct {
	Name   string   // as the source gave it, before any prefix
	Groups []string // as the source gave them, before any prefix
	Source string   // SourceToken, SourceOIDC, SourceHub or SourceProxy, for audit
	// Bearer is the raw bearer token the person presented, kept only so forwardToken clusters
	// can get it. Never logged. It is set for OIDC ID tokens only: a static or hub-issued
	// token is a credential for the hub itself, and forwarding it would let anyone who can read
	// one cluster's requests use the hub as that person on every other cluster.
	Bearer string
	// from is how the person of a hub-issued token signed in when it was
	// made (hubClaims.From): one made for someone on the users list holds
	// only while they are on it (stillHolds), and a token made from it says
	// the same.
	from string
	// session is when a page session's token was made, in Unix nanoseconds
	// (hubClaims.Session); zero for every other token. Signing out voids the
	// sessions made before it (EndSessions).
	session int64
	// expires is when a hub-issued token or an OIDC ID token expires (a
	// token made from a hub-issued one expires then too); zero for the
	// users list's tokens and the auth proxy's people.
	expires time.Time
	// cred names the static token a person on the users list signed in
	// with (credOf), or that a hub-issued token was made from: such a token
	// holds only while the list still has that static token, so replacing
	// a leaked one also ends the kubeconfigs and sessions made with it.
	cred string
}

// credOf names a static token by the start of its SHA-256: the users list
// holds the hashes, so naming one gives nothing away.
func credOf(h listfile.Hash) string { return hex.EncodeToString(h[:8]) }

// String names the person for logs: never the token.
func (p Person) String() string { return fmt.Sprintf("%q (%s)", p.Name, p.Source) }

// Authenticator says who requests are from. It is safe for concurrent use. Build it with New;
// Close it to stop its file watching and its requests to the OIDC issuer.
type Authenticator struct {
	cfg   Config
	log   *slog.Logger
	users *users     // nil without a users list
	hub   *hubTokens // always set
	// verified are the JWTs (hub-issued, OIDC) checked lately.
	verified verifiedTokens
	// signedOut voids the page sessions of people who signed out.
	signedOut signedOut
	oidc      *oidcSource  // nil without an issuer
	proxy     *proxyConfig // nil without an auth proxy

	watchersMu sync.Mutex // guards watchers
	watchers   map[*func()]struct{}
	// loadedHooks and signOutHooks tell the other hub replicas
	// (replicas.go).
	loadedHooks  hooks[func(UsersList)]
	signOutHooks hooks[func(name string, at, until time.Time)]

	life context.Context // done when Close is called
	stop context.CancelFunc
	wg   sync.WaitGroup // the users watcher and OIDC discovery
	once sync.Once
}

// New checks cfg, reads the files it names (users list, signing keys, OIDC CA), starts
// watching the users file, and starts discovering the OIDC issuer in the background. Its errors
// are one line and name the setting. An issuer that can't be reached is not an error: it is
// logged, and discovery is tried again when an ID token arrives.
func New(cfg Config) (*Authenticator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	a := &Authenticator{cfg: cfg, log: cfg.Logger}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	var err error
	if a.users, err = loadUsers(cfg); err != nil {
		return nil, err
	}
	if a.hub, err = newHubTokens(cfg, a.log); err != nil {
		return nil, err
	}
	if cfg.ProxyUserHeader != "" {
		a.proxy = newProxyConfig(cfg)
	}
	a.life, a.stop = context.WithCancel(context.Background())
	if cfg.OIDC.Issuer != "" {
		if a.oidc, err = newOIDCSource(a.life, &a.wg, cfg, a.log); err != nil {
			a.stop()
			return nil, err
		}
	}
	if a.users != nil && a.users.path != "" {
		a.users.changed = a.usersChanged
		a.users.loadedHook = func(l UsersList) {
			for _, f := range a.loadedHooks.all() {
				f(l)
			}
		}
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			a.users.watch(a.life, cfg, a.log)
		}()
	}
	return a, nil
}

// Close stops watching the users file and cancels requests to the OIDC issuer, then returns
// once its goroutines have. It may be called more than once. Authenticate still works after
// Close, except that an issuer not yet discovered stays so.
func (a *Authenticator) Close() error {
	a.once.Do(func() {
		a.stop()
		if a.oidc != nil {
			a.oidc.close()
		}
		a.wg.Wait()
		if a.oidc != nil {
			a.oidc.transport.close()
		}
	})
	return nil
}

// Sources names the ways in that are configured, in the order bearer tokens are tried, with
// SourceProxy last: for the hub's start-up log.
func (a *Authenticator) Sources() []string {
	var s []string
	if a.users != nil {
		s = append(s, SourceToken)
	}
	s = append(s, SourceHub)
	if a.oidc != nil {
		s = append(s, SourceOIDC)
	}
	if a.proxy != nil {
		s = append(s, SourceProxy)
	}
	return s
}

// ProxyHeaders returns the names of the auth proxy's headers (canonical form), or nil without
// an auth proxy. The hub removes them from every request it forwards, whoever sent them.
func (a *Authenticator) ProxyHeaders() []string {
	if a.proxy == nil {
		return nil
	}
	return a.proxy.headers()
}

// Authenticate says who r is from. It reads Authorization and the auth proxy's headers:
//
//   - "Authorization: Bearer <token>": the token is tried against the users list, then as a
//     hub-issued token (a JWT whose issuer is the hub's), then as an OIDC ID token. A token
//     that is none of these is an error.
//   - no Authorization header: the auth proxy's headers, when the TCP peer is trusted. From
//     any other peer they are ignored.
//   - another scheme, like Basic: the auth proxy's headers if they count (proxies such as
//     oauth2-proxy pass Basic credentials of their own), else an error.
//
// It reports ok=false with no error when r carries no credentials at all, and an error when
// it carries bad ones: the caller answers 401, except to an error that wraps ErrIdentity (a
// name or group with control or invisible characters, checkText), which it answers with 403.
func (a *Authenticator) Authenticate(r *http.Request) (Person, bool, error) {
	values := r.Header.Values("Authorization")
	if len(values) > 1 {
		return Person{}, false, fmt.Errorf("%w: the request has %d Authorization headers; send one", ErrMalformed, len(values))
	}
	p, ok, err := a.authenticate(r, values)
	if ok {
		if err := checkPerson(p); err != nil {
			return Person{}, false, err
		}
	}
	return p, ok, err
}

// authenticate is Authenticate before the person is checked.
func (a *Authenticator) authenticate(r *http.Request, values []string) (Person, bool, error) {
	if len(values) == 0 || strings.TrimSpace(values[0]) == "" {
		return a.fromProxy(r)
	}
	token, isBearer, err := bearerToken(values[0])
	if err != nil {
		return Person{}, false, err
	}
	if !isBearer {
		if p, ok, err := a.fromProxy(r); ok || err != nil {
			return p, ok, err
		}
		return Person{}, false, fmt.Errorf("%w: the Authorization header must be \"Bearer <token>\"%s", ErrMalformed, schemeHint(values[0]))
	}
	p, err := a.fromBearer(r.Context(), token)
	if err != nil {
		return Person{}, false, err
	}
	return p, true, nil
}

// bearerToken reads an Authorization value. It reports isBearer=false for another scheme.
func bearerToken(v string) (token string, isBearer bool, err error) {
	v = strings.TrimSpace(v)
	scheme, rest := v, ""
	if i := strings.IndexAny(v, " \t"); i >= 0 {
		scheme, rest = v[:i], strings.TrimSpace(v[i+1:])
	}
	if !strings.EqualFold(scheme, "Bearer") {
		return "", false, nil
	}
	switch {
	case rest == "":
		return "", true, fmt.Errorf("%w: the Authorization header says Bearer but has no token", ErrMalformed)
	case len(rest) > maxTokenBytes:
		return "", true, fmt.Errorf("%w: the bearer token has %d bytes, more than the %d the hub reads", ErrMalformed, len(rest), maxTokenBytes)
	}
	return rest, true, nil
}

// schemeHint names the scheme an Authorization value used, when it is short and looks like one:
// a value with no scheme may be a token pasted without "Bearer ", and must not be shown.
func schemeHint(v string) string {
	scheme, _, found := strings.Cut(strings.TrimSpace(v), " ")
	if !found || len(scheme) > 16 || strings.ContainsFunc(scheme, func(r rune) bool {
		return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || r == '-')
	}) {
		return "; it has no scheme the hub knows"
	}
	return fmt.Sprintf("; it has the scheme %q", scheme)
}

// fromBearer tries token as a static token, a hub-issued token, then an OIDC ID token.
func (a *Authenticator) fromBearer(ctx context.Context, token string) (Person, error) {
	if u, h, ok := a.users.lookup(token); ok {
		return Person{Name: u.Name, Groups: u.Groups, Source: SourceToken, cred: credOf(h)}, nil
	}
	if p, ok := a.verified.recall(token, a.cfg.now()); ok {
		return a.stillHolds(p)
	}
	claims, isJWT := peekJWT(token)
	if !isJWT {
		if a.users == nil {
			return Person{}, fmt.Errorf("%w: no users list is set (%s), and it is not a JWT, so not an OIDC ID token or a hub-issued one", ErrUnknownToken, SettingUsers)
		}
		return Person{}, fmt.Errorf("%w: it is not in the users list, and not a JWT, so not an OIDC ID token or a hub-issued one", ErrUnknownToken)
	}
	var p Person
	var until time.Time
	var err error
	switch {
	case claims.Issuer == hubIssuer:
		p, until, err = a.hub.verify(token)
	case a.oidc == nil:
		return Person{}, fmt.Errorf("%w: a JWT issued by %q, but no OIDC issuer is set (%s) and the hub didn't issue it", ErrInvalidToken, short(claims.Issuer), SettingOIDCIssuer)
	default:
		p, until, err = a.oidc.verify(ctx, token)
	}
	if err != nil {
		return Person{}, err
	}
	a.verified.remember(token, p, until, a.cfg.now())
	return a.stillHolds(p)
}

// stillHolds checks what can void a hub-issued token before it expires.
// A page session signed out since it was made no longer holds. A token made
// for someone on the users list holds to the list in force: taken off it,
// they lose what their kubeconfigs and page session let them do at once,
// and their groups are the list's, not those the token was issued with.
// Tokens made for people signed in through OIDC or the auth proxy can't be
// checked against a list; they hold until they expire.
func (a *Authenticator) stillHolds(p Person) (Person, error) {
	if p.Source != SourceHub {
		return p, nil
	}
	if p.session != 0 && a.signedOut.voids(p.Name, p.session) {
		return Person{}, fmt.Errorf("%w: a page session of %q that was signed out; sign in again", ErrInvalidToken, p.Name)
	}
	if p.from != SourceToken {
		return p, nil
	}
	u, ok := a.users.named(p.Name)
	if !ok {
		return Person{}, fmt.Errorf("%w: a hub-issued token for %q, who is no longer in the users list", ErrInvalidToken, p.Name)
	}
	if p.cred != "" && !slices.ContainsFunc(u.TokenHashes, func(h listfile.Hash) bool { return credOf(h) == p.cred }) {
		return Person{}, fmt.Errorf("%w: a hub-issued token for %q, made with a token the users list no longer has for them; get a new kubeconfig", ErrInvalidToken, p.Name)
	}
	p.Groups = u.Groups
	return p, nil
}
