package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
)

// keysCooldown is how long after one fetch of the issuer's keys the next
// may start. A token none of the keys verifies is the sign to fetch them
// again (the issuer may have added one), but anyone can make such tokens.
// Issuers publish a key before they sign with it, so a token signed with a
// new key is refused for this long at most.
const keysCooldown = 30 * time.Second

// maxKeysBytes bounds the issuer's answer with its keys.
const maxKeysBytes = 1 << 20

// signingAlgs are the algorithms a key set may verify: those go-oidc
// accepts. The verifier has already checked the token's against the
// issuer's own list.
var signingAlgs = []jose.SignatureAlgorithm{
	jose.RS256, jose.RS384, jose.RS512,
	jose.ES256, jose.ES384, jose.ES512,
	jose.PS256, jose.PS384, jose.PS512,
	jose.EdDSA,
}

// issuerKeys is the issuer's published keys (its jwks_uri), as an
// oidc.KeySet. It fetches them when a token first needs them and again
// when none verifies a token, as issuers that rotate keys expect, but at
// most once per keysCooldown: go-oidc's RemoteKeySet fetches again for
// every such token, so made-up tokens could make the hub ask the issuer
// once per request.
type issuerKeys struct {
	url    string
	client *http.Client
	life   context.Context
	now    func() time.Time
	// spawn runs a fetch in a goroutine its owner waits for, and reports
	// false, running nothing, once the owner is closing.
	spawn func(func()) bool

	mu       sync.Mutex // guards the following
	keys     []jose.JSONWebKey
	fetches  uint64        // how many fetches have ended, so a caller can tell its keys are stale
	started  time.Time     // when the last fetch started; zero before the first
	inflight chan struct{} // closed when the fetch in flight ends; nil when none is
	err      error         // the last fetch's
}

// VerifySignature returns the token's payload if one of the issuer's keys
// verifies its signature.
func (k *issuerKeys) VerifySignature(ctx context.Context, raw string) ([]byte, error) {
	jws, err := jose.ParseSigned(raw, signingAlgs)
	if err != nil {
		return nil, fmt.Errorf("malformed jwt: %w", err)
	}
	k.mu.Lock()
	keys, seen := k.keys, k.fetches
	k.mu.Unlock()
	if payload, ok := verifyWith(keys, jws); ok {
		return payload, nil
	}
	keys, err = k.refresh(ctx, seen)
	if err != nil {
		return nil, err
	}
	if payload, ok := verifyWith(keys, jws); ok {
		return payload, nil
	}
	return nil, errors.New("none of the issuer's keys verifies it")
}

func verifyWith(keys []jose.JSONWebKey, jws *jose.JSONWebSignature) ([]byte, bool) {
	kid := jws.Signatures[0].Header.KeyID
	for i := range keys {
		if kid != "" && keys[i].KeyID != kid {
			continue
		}
		if payload, err := jws.Verify(&keys[i]); err == nil {
			return payload, true
		}
	}
	return nil, false
}

// refresh returns the keys of a fetch that ended after the caller read the
// keys, which it did when seen fetches had ended: one that has ended since,
// the one in flight, or its own. Within keysCooldown of the last
// fetch's start, it fetches nothing and says so.
func (k *issuerKeys) refresh(ctx context.Context, seen uint64) ([]jose.JSONWebKey, error) {
	k.mu.Lock()
	if k.fetches != seen {
		defer k.mu.Unlock()
		return k.keys, k.err
	}
	done := k.inflight
	if done == nil {
		if !k.started.IsZero() {
			if since := k.now().Sub(k.started); since < keysCooldown {
				k.mu.Unlock()
				return nil, fmt.Errorf("none of the issuer's keys verifies it, as fetched %s ago; the hub fetches them again %s after that at the earliest",
					since.Round(time.Second), keysCooldown)
			}
		}
		done = make(chan struct{})
		// In a goroutine of its own, with the hub's life, not the
		// request's: whoever waits for it shares it, and each may leave
		// when their request ends, the one that started it too.
		fetch := func() {
			keys, err := k.fetch(k.life)
			k.mu.Lock()
			if err == nil {
				k.keys = keys
			}
			k.err, k.inflight = err, nil
			k.fetches++
			close(done)
			k.mu.Unlock()
		}
		if !k.spawn(fetch) {
			k.mu.Unlock()
			return nil, errors.New("the hub is stopping")
		}
		k.inflight, k.started = done, k.now()
	}
	k.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		return nil, fmt.Errorf("gave up waiting for the issuer's keys: %w", ctx.Err())
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.keys, k.err
}

// fetch reads the issuer's keys.
func (k *issuerKeys) fetch(ctx context.Context) ([]jose.JSONWebKey, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.url, nil)
	if err != nil {
		return nil, fmt.Errorf("the issuer's jwks_uri %q: %w", k.url, err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := k.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetching the issuer's keys: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxKeysBytes+1))
	if err != nil {
		return nil, fmt.Errorf("fetching the issuer's keys: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetching the issuer's keys: %s: %s", resp.Status, cut(strings.Join(strings.Fields(string(body)), " "), 300))
	}
	if len(body) > maxKeysBytes {
		return nil, fmt.Errorf("the issuer's keys at %s are more than %d bytes", k.url, maxKeysBytes)
	}
	keys, err := parseKeys(body)
	if err != nil {
		return nil, fmt.Errorf("the issuer's keys at %s can't be read: %w", k.url, err)
	}
	return keys, nil
}

// parseKeys reads a JWK set. A key go-jose can't read (another kind, say)
// is left out, as go-oidc does.
func parseKeys(body []byte) ([]jose.JSONWebKey, error) {
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(body, &set); err != nil {
		return nil, err
	}
	keys := make([]jose.JSONWebKey, 0, len(set.Keys))
	for _, raw := range set.Keys {
		var key jose.JSONWebKey
		if json.Unmarshal(raw, &key) == nil {
			keys = append(keys, key)
		}
	}
	return keys, nil
}
