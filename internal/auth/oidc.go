package auth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/go-jose/go-jose/v4"
	"golang.org/x/oauth2"
)

// oidcSource checks OIDC ID tokens. It discovers the issuer lazily: once in the background at
// start, and again when an ID token arrives, at most as often as its backoff allows. So an
// issuer that is down while the hub starts neither blocks the start nor disables OIDC: ID tokens
// are refused (ErrOIDCUnavailable) until it answers.
type oidcSource struct {
	cfg       OIDCConfig // with defaults filled in
	now       func() time.Time
	log       *slog.Logger
	client    *http.Client
	transport *trackedTransport
	life      context.Context
	wg        *sync.WaitGroup // the Authenticator's: discovery goroutines

	mu       sync.Mutex // guards the following
	verifier *oidc.IDTokenVerifier
	endpoint oauth2.Endpoint // the issuer's, for browser sign-in
	inflight chan struct{}   // closed when the discovery in flight ends; nil when none is
	closed   bool
	failures int
	lastErr  error
	nextTry  time.Time
}

func newOIDCSource(life context.Context, wg *sync.WaitGroup, c Config, log *slog.Logger) (*oidcSource, error) {
	o := &oidcSource{cfg: c.OIDC, now: c.now, log: log, life: life, wg: wg}
	if o.cfg.UsernameClaim == "" {
		o.cfg.UsernameClaim = defaultOIDCUsernameClaim
	}
	if o.cfg.GroupsClaim == "" {
		o.cfg.GroupsClaim = defaultOIDCGroupsClaim
	}
	if o.cfg.RetryMax <= 0 {
		o.cfg.RetryMax = defaultOIDCRetryMax
	}
	if o.cfg.RequestTimeout <= 0 {
		o.cfg.RequestTimeout = defaultOIDCRequestTimeout
	}
	base := http.DefaultTransport.(*http.Transport).Clone() // keeps HTTPS_PROXY and NO_PROXY
	if o.cfg.CAFile != "" {
		pool, err := readCAFile(o.cfg.CAFile)
		if err != nil {
			return nil, err
		}
		base.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	o.transport = &trackedTransport{base: base, life: life}
	o.client = &http.Client{Transport: o.transport, Timeout: o.cfg.RequestTimeout}
	o.mu.Lock()
	o.startLocked()
	o.mu.Unlock()
	return o, nil
}

func readCAFile(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s can't be read: %w", SettingOIDCCAFile, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("%s must be a PEM file of CA certificates; %s has none", SettingOIDCCAFile, path)
	}
	return pool, nil
}

// startLocked starts a discovery, unless the source is closed.
func (o *oidcSource) startLocked() {
	if o.closed {
		return
	}
	done := make(chan struct{})
	o.inflight = done
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		defer close(done)
		o.discover()
	}()
}

func (o *oidcSource) discover() {
	v, endpoint, err := o.provider()
	o.mu.Lock()
	defer o.mu.Unlock()
	o.inflight = nil
	if err != nil {
		o.failures++
		delay := time.Second << min(o.failures-1, 16)
		delay = min(delay, o.cfg.RetryMax)
		// An issuer's error page can be long and span lines; it goes into logs and errors.
		err = errors.New(cut(strings.Join(strings.Fields(err.Error()), " "), 300))
		o.lastErr, o.nextTry = err, o.now().Add(delay)
		if o.life.Err() == nil {
			o.log.Warn("Can't reach the OIDC issuer, so ID tokens are refused until it answers; the hub tries again when one arrives, after retryIn at the earliest",
				"issuer", o.cfg.Issuer, "retryIn", delay, "err", err)
		}
		return
	}
	o.verifier, o.endpoint = v, endpoint
	if o.failures > 0 {
		o.log.Info("Reached the OIDC issuer", "issuer", o.cfg.Issuer, "afterFailures", o.failures)
	} else {
		o.log.Info("Reached the OIDC issuer", "issuer", o.cfg.Issuer)
	}
	o.failures, o.lastErr = 0, nil
}

// provider discovers the issuer, and makes a verifier of its ID tokens
// whose keys are issuerKeys.
func (o *oidcSource) provider() (*oidc.IDTokenVerifier, oauth2.Endpoint, error) {
	p, err := oidc.NewProvider(oidc.ClientContext(o.life, o.client), o.cfg.Issuer)
	if err != nil {
		return nil, oauth2.Endpoint{}, err
	}
	var meta struct {
		KeysURL string   `json:"jwks_uri"`
		Algs    []string `json:"id_token_signing_alg_values_supported"`
	}
	if err := p.Claims(&meta); err != nil {
		return nil, oauth2.Endpoint{}, fmt.Errorf("the issuer's discovery document can't be read: %w", err)
	}
	if meta.KeysURL == "" {
		return nil, oauth2.Endpoint{}, errors.New("the issuer's discovery document names no jwks_uri, where its keys are")
	}
	// As go-oidc's own verifier: the issuer's algorithms it knows, or
	// RS256 if none.
	var algs []string
	for _, a := range meta.Algs {
		if slices.Contains(signingAlgs, jose.SignatureAlgorithm(a)) {
			algs = append(algs, a)
		}
	}
	keys := &issuerKeys{url: meta.KeysURL, client: o.client, life: o.life, now: o.now, spawn: o.spawn}
	cfg := &oidc.Config{ClientID: o.cfg.ClientID, Now: o.now, SupportedSigningAlgs: algs}
	return oidc.NewVerifier(o.cfg.Issuer, keys, cfg), p.Endpoint(), nil
}

// getVerifier returns the verifier, discovering the issuer first if that is due, or waiting
// for the discovery in flight.
func (o *oidcSource) getVerifier(ctx context.Context) (*oidc.IDTokenVerifier, error) {
	o.mu.Lock()
	if o.verifier != nil {
		defer o.mu.Unlock()
		return o.verifier, nil
	}
	if o.inflight == nil {
		wait := o.nextTry.Sub(o.now())
		switch {
		case o.closed:
			o.mu.Unlock()
			return nil, fmt.Errorf("%w: %s: %w", ErrOIDCUnavailable, o.cfg.Issuer, errClosed)
		case wait > 0:
			defer o.mu.Unlock()
			return nil, fmt.Errorf("%w: %s (%v); the hub tries again in %s at the earliest", ErrOIDCUnavailable, o.cfg.Issuer, o.lastErr, wait.Round(time.Second))
		}
		o.startLocked()
	}
	done := o.inflight
	o.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %s: gave up waiting for discovery: %w", ErrOIDCUnavailable, o.cfg.Issuer, ctx.Err())
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.verifier == nil {
		return nil, fmt.Errorf("%w: %s (%v)", ErrOIDCUnavailable, o.cfg.Issuer, o.lastErr)
	}
	return o.verifier, nil
}

// spawn runs f in a goroutine the Authenticator's Close waits for, unless
// the source is closed.
func (o *oidcSource) spawn(f func()) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return false
	}
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		f()
	}()
	return true
}

func (o *oidcSource) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.closed = true
}

// oidcRecall is how long a verified ID token is taken without checking it
// again, at most: the issuer may have dropped the key that signed it.
const oidcRecall = time.Minute

// verify checks an ID token: signature, issuer, audience and expiry by go-oidc, then the
// username and groups claims. It says until when the answer holds: the token's expiry, or
// oidcRecall from now if that is sooner.
func (o *oidcSource) verify(ctx context.Context, raw string) (Person, time.Time, error) {
	p, exp, err := o.check(ctx, raw)
	if err != nil {
		return Person{}, time.Time{}, err
	}
	if soon := o.now().Add(oidcRecall); soon.Before(exp) {
		exp = soon
	}
	return p, exp, nil
}

func (o *oidcSource) check(ctx context.Context, raw string) (Person, time.Time, error) {
	v, err := o.getVerifier(ctx)
	if err != nil {
		return Person{}, time.Time{}, err
	}
	tok, err := v.Verify(ctx, raw)
	if err != nil {
		var expired *oidc.TokenExpiredError
		if errors.As(err, &expired) {
			return Person{}, time.Time{}, fmt.Errorf("%w: an OIDC ID token that expired at %s; sign in again", ErrExpired, expired.Expiry.UTC().Format(time.RFC3339))
		}
		return Person{}, time.Time{}, fmt.Errorf("%w: an OIDC ID token the hub can't accept: %v", ErrInvalidToken, err)
	}
	var claims map[string]json.RawMessage
	if err := tok.Claims(&claims); err != nil {
		return Person{}, time.Time{}, fmt.Errorf("%w: an OIDC ID token whose claims can't be read: %v", ErrInvalidToken, err)
	}
	name, err := o.username(claims)
	if err != nil {
		return Person{}, time.Time{}, err
	}
	groups, err := o.groups(claims)
	if err != nil {
		return Person{}, time.Time{}, err
	}
	return Person{Name: name, Groups: groups, Source: SourceOIDC, Bearer: raw, expires: tok.Expiry}, tok.Expiry, nil
}

func (o *oidcSource) username(claims map[string]json.RawMessage) (string, error) {
	c := o.cfg.UsernameClaim
	var name string
	if raw, ok := claims[c]; !ok || json.Unmarshal(raw, &name) != nil || name == "" {
		return "", fmt.Errorf("%w: an OIDC ID token without a %q claim as text, which names the person (%s)", ErrInvalidToken, c, SettingOIDCUsernameClaim)
	}
	if c == "email" {
		var verified bool
		if json.Unmarshal(claims["email_verified"], &verified) != nil || !verified {
			return "", fmt.Errorf("%w: an OIDC ID token for %q, an email address the issuer hasn't verified (email_verified is not true); verify it, or name people by another claim (%s)", ErrInvalidToken, name, SettingOIDCUsernameClaim)
		}
	}
	return name, nil
}

// groups reads the groups claim: absent or null means none; text is one group.
func (o *oidcSource) groups(claims map[string]json.RawMessage) ([]string, error) {
	raw, ok := claims[o.cfg.GroupsClaim]
	if !ok || string(raw) == "null" {
		return nil, nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return []string{one}, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("%w: an OIDC ID token whose %q claim is not text or a list of texts (%s)", ErrInvalidToken, o.cfg.GroupsClaim, SettingOIDCGroupsClaim)
	}
	return list, nil
}

// trackedTransport ties every request to the issuer to the Authenticator's life, so that Close
// can cancel them and wait for them, including those go-oidc makes on goroutines of its own to
// refresh keys.
type trackedTransport struct {
	base *http.Transport
	life context.Context

	mu     sync.Mutex // guards closed and wg.Add
	closed bool
	wg     sync.WaitGroup
}

var errClosed = errors.New("the hub's authenticator is closed")

func (t *trackedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, errClosed
	}
	t.wg.Add(1)
	t.mu.Unlock()
	ctx, cancel := context.WithCancel(req.Context())
	stop := context.AfterFunc(t.life, cancel)
	done := sync.OnceFunc(func() { stop(); cancel(); t.wg.Done() })
	resp, err := t.base.RoundTrip(req.WithContext(ctx))
	if err != nil {
		done()
		return nil, err
	}
	resp.Body = &trackedBody{ReadCloser: resp.Body, done: done}
	return resp, nil
}

// close waits for requests in flight (whose contexts the caller has cancelled through life),
// then closes idle connections, ending their goroutines.
func (t *trackedTransport) close() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.wg.Wait()
	t.base.CloseIdleConnections()
}

type trackedBody struct {
	io.ReadCloser
	done func()
}

func (b *trackedBody) Close() error {
	err := b.ReadCloser.Close()
	b.done()
	return err
}
