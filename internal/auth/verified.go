package auth

import (
	"crypto/sha256"
	"slices"
	"sync"
	"time"
)

// verifiedTokens remembers the JWTs that passed verification lately, by
// their SHA-256: whom each names, and until when that holds. kubectl sends
// the same token with every request, and checking a JWT's signature costs
// 100 µs or more on a small machine (BenchmarkHubToken); a token found here
// costs a hash.
type verifiedTokens struct {
	mu sync.Mutex // guards m
	m  map[[32]byte]verifiedToken
}

type verifiedToken struct {
	p     Person
	until time.Time
}

// maxVerified bounds the tokens remembered: far more than the people who
// use a hub within a token's life. Past it, expired ones are dropped, then
// any, down to seven eighths.
const maxVerified = 4096

// recall returns whom raw names if it was verified and still holds at now.
func (v *verifiedTokens) recall(raw string, now time.Time) (Person, bool) {
	key := sha256.Sum256([]byte(raw))
	v.mu.Lock()
	t, ok := v.m[key]
	v.mu.Unlock()
	if !ok || now.After(t.until) {
		return Person{}, false
	}
	return t.p, true
}

// remember records that raw names p until then.
func (v *verifiedTokens) remember(raw string, p Person, until, now time.Time) {
	// Clipped, so that a caller's append can't write into what later
	// requests with the same token get.
	p.Groups = slices.Clip(p.Groups)
	key := sha256.Sum256([]byte(raw))
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.m == nil {
		v.m = make(map[[32]byte]verifiedToken)
	}
	if len(v.m) >= maxVerified {
		for k, t := range v.m {
			if now.After(t.until) {
				delete(v.m, k)
			}
		}
		// Still full of live tokens: make room for a while, not for one,
		// so a flood of new tokens doesn't walk the map at each.
		for k := range v.m {
			if len(v.m) < maxVerified*7/8 {
				break
			}
			delete(v.m, k)
		}
	}
	v.m[key] = verifiedToken{p: p, until: until}
}
