package auth

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"time"
)

// What hub replicas share of people (decision 034): each replica reads its
// own users file, but a Secret volume reaches each pod on the kubelet's
// own schedule, a minute or more apart, so the replica that first sees a
// new list gives it to the others; and a sign-out on one voids the
// person's sessions on all. internal/peers carries both; this file is what
// it hooks into.

// UsersList is a users list as replicas share it: its bytes, and when a
// replica first saw that content.
type UsersList struct {
	Data []byte
	// Hash is the SHA-256 of Data: a list is the one in force when its
	// hash is.
	Hash [sha256.Size]byte
	// At is when a replica first took this content in: for its own file
	// at start, the file's modification time (what the kubelet wrote, not
	// when the pod started reading it); for a change of the file seen
	// since, the time it was seen.
	At time.Time
}

// NewerThan orders lists: the later At wins, and of two taken in at the
// same instant the greater hash, so every replica picks the same one.
func (l UsersList) NewerThan(o UsersList) bool {
	if !l.At.Equal(o.At) {
		return l.At.After(o.At)
	}
	return bytes.Compare(l.Hash[:], o.Hash[:]) > 0
}

// ErrNoUsersList is TakeUsers' answer on a hub with no users list set:
// its replicas are meant to be configured alike.
var ErrNoUsersList = errors.New("this hub has no users list (TETHER_USERS or TETHER_USERS_FILE)")

// Users returns the users list in force, or ok=false on a hub without one.
func (a *Authenticator) Users() (UsersList, bool) {
	if a.users == nil {
		return UsersList{}, false
	}
	a.users.mu.Lock()
	defer a.users.mu.Unlock()
	return a.users.list, true
}

// TakeUsers puts in force a users list another replica took in, when it
// is newer (NewerThan) than the one in force here, as a reload of this
// hub's own file does: the people it drops lose what they hold open
// (OnUsersChanged). It reports whether it did; the list in force given
// with a later stamp only takes that stamp. A list that doesn't parse,
// or whose hash isn't its bytes', is an error, and the list in force
// stays. OnUsersLoaded is not called: the replica that loaded it tells the
// others itself.
func (a *Authenticator) TakeUsers(l UsersList) (bool, error) {
	u := a.users
	if u == nil {
		return false, ErrNoUsersList
	}
	if sha256.Sum256(l.Data) != l.Hash {
		return false, errors.New("the users list's SHA-256 is not that of its bytes")
	}
	u.mu.Lock()
	if !l.NewerThan(u.list) {
		u.mu.Unlock()
		return false, nil
	}
	if l.Hash == u.list.Hash {
		// The same list, taken in later elsewhere (a pod started since,
		// its volume written then): the later stamp is kept, so that a
		// third replica's list is weighed the same way everywhere,
		// whichever replica this one asked first.
		u.list.At = l.At
		u.mu.Unlock()
		return false, nil
	}
	list, err := parseUsers(u.setting, l.Data, a.cfg)
	if err != nil {
		u.mu.Unlock()
		return false, fmt.Errorf("the users list doesn't parse: %w", err)
	}
	u.replace(list)
	u.list = l
	u.mu.Unlock()
	a.usersChanged()
	return true, nil
}

// OnUsersLoaded has f called each time this hub's own users file brings in
// a list other than the one in force, once it is in force, until the
// returned function is called: the other replicas are to have it too. f
// runs on the file watcher's goroutine, so it must not wait long.
func (a *Authenticator) OnUsersLoaded(f func(UsersList)) (stop func()) {
	return a.loadedHooks.add(f)
}

// OnSignOut has f called after each sign-out on this hub (EndSessions),
// with the person's name, when it took effect and until when it matters,
// until the returned function is called: the other replicas are to void
// the person's sessions too (SignedOutElsewhere). f runs on the request
// that signed out, so it must not wait long.
func (a *Authenticator) OnSignOut(f func(name string, at, until time.Time)) (stop func()) {
	return a.signOutHooks.add(f)
}

// SignedOutElsewhere takes in a sign-out another replica took: name's
// page sessions made before at are void here too, until until. It calls no
// OnSignOut hook. The caller ends what the person holds open here
// (kubeproxy.Proxy.SignedOut), as a sign-out on this hub does.
func (a *Authenticator) SignedOutElsewhere(name string, at, until time.Time) {
	now := a.cfg.now()
	if name == "" || !until.After(now) {
		return // nothing it could void is still valid
	}
	a.signedOut.markAt(name, at, until, now)
}

// hooks are functions to call on an event, each until its stop is called.
type hooks[F any] struct {
	mu sync.Mutex // guards m
	m  map[*F]struct{}
}

func (h *hooks[F]) add(f F) (stop func()) {
	key := &f
	h.mu.Lock()
	if h.m == nil {
		h.m = map[*F]struct{}{}
	}
	h.m[key] = struct{}{}
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		delete(h.m, key)
		h.mu.Unlock()
	}
}

// all returns the functions to call now, so none is called under the lock.
func (h *hooks[F]) all() []F {
	h.mu.Lock()
	defer h.mu.Unlock()
	fs := make([]F, 0, len(h.m))
	for f := range h.m {
		fs = append(fs, *f)
	}
	return fs
}
