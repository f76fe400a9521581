package auth

import (
	"fmt"
	"slices"
	"time"

	"github.com/tetherhq/tether/internal/listfile"
)

// Expires is when the credential p signed in with stops working: a hub-issued token's or an
// OIDC ID token's expiry. It is zero for credentials that don't expire (the users list's
// tokens, the auth proxy's headers); those end when the list no longer has them (Recheck).
func (p Person) Expires() time.Time { return p.expires }

// Recheck says whether p, authenticated earlier, would be let in now: the hub asks it of the
// requests it holds open when the users list changes or someone signs out, and ends those it
// refuses. It returns p with the groups the users list gives them now. Its error wraps
// ErrExpired for a credential past its expiry, and ErrInvalidToken for one revoked (taken off
// the list, its token replaced, a page session signed out).
//
// The auth proxy's people hold: the proxy decides each request anew, and the hub has no list
// of them to check.
func (a *Authenticator) Recheck(p Person) (Person, error) {
	if !p.expires.IsZero() && !a.cfg.now().Before(p.expires) {
		return Person{}, fmt.Errorf("%w: the credential of %q expired at %s", ErrExpired, p.Name, p.expires.UTC().Format(time.RFC3339))
	}
	if p.Source != SourceToken {
		return a.stillHolds(p)
	}
	u, ok := a.users.named(p.Name)
	if !ok || !slices.ContainsFunc(u.TokenHashes, func(h listfile.Hash) bool { return credOf(h) == p.cred }) {
		return Person{}, fmt.Errorf("%w: the users list no longer has the token %q signed in with", ErrInvalidToken, p.Name)
	}
	p.Groups = u.Groups
	return p, nil
}

// Limits returns the users list's limits for p, zero for those it doesn't set. Only people the
// list admits have them (its tokens, and the hub-issued tokens made from them): a list entry's
// name says nothing of who an OIDC or auth proxy person of the same name is.
func (a *Authenticator) Limits(p Person) Limits {
	if p.Source != SourceToken && (p.Source != SourceHub || p.from != SourceToken) {
		return Limits{}
	}
	u, _ := a.users.named(p.Name)
	return u.Limits
}

// OnUsersChanged has f called after each reload of the users file, once the new list is in
// force, until the returned function is called. f runs on the watcher's goroutine, so it must
// not wait long.
func (a *Authenticator) OnUsersChanged(f func()) (stop func()) {
	key := &f
	a.watchersMu.Lock()
	if a.watchers == nil {
		a.watchers = map[*func()]struct{}{}
	}
	a.watchers[key] = struct{}{}
	a.watchersMu.Unlock()
	return func() {
		a.watchersMu.Lock()
		delete(a.watchers, key)
		a.watchersMu.Unlock()
	}
}

func (a *Authenticator) usersChanged() {
	a.watchersMu.Lock()
	fs := make([]func(), 0, len(a.watchers))
	for f := range a.watchers {
		fs = append(fs, *f)
	}
	a.watchersMu.Unlock()
	for _, f := range fs {
		f()
	}
}
