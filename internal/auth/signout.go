package auth

import (
	"sync"
	"time"
)

// signedOut remembers who signed out of the page, and when: their session
// tokens made before then no longer hold. Hub-issued tokens are stateless,
// so this is the one thing that ends one before it expires.
//
// It is kept per person, not per token: what it holds is bounded by the
// people who can sign in, not by how often they do. So signing out ends a
// person's sessions in every browser.
type signedOut struct {
	mu   sync.Mutex // guards m and next
	m    map[string]signOut
	next int // the size at which m is swept for marks no longer needed
}

type signOut struct {
	at    int64     // Unix nanoseconds: sessions made before then are void
	until time.Time // when no session made before at can still be valid
}

// mark records that name signed out at now, and that it matters until
// until.
func (s *signedOut) mark(name string, now, until time.Time) {
	s.markAt(name, now, until, now)
}

// markAt records that name signed out at at, as another replica tells
// (its clock, not ours), and that it matters until until. A mark never
// moves back: a sign-out told late doesn't revive sessions a later one
// voided.
func (s *signedOut) markAt(name string, at, until, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = make(map[string]signOut)
	}
	if len(s.m) >= s.next {
		for n, o := range s.m {
			if now.After(o.until) {
				delete(s.m, n)
			}
		}
		// Swept again only once it has doubled: each sweep is paid for by
		// as many marks as it kept.
		s.next = 2*len(s.m) + 64
	}
	o := s.m[name]
	o.at = max(o.at, at.UnixNano())
	if until.After(o.until) {
		o.until = until
	}
	s.m[name] = o
}

// voids reports whether a session of name's made at made (Unix
// nanoseconds) was signed out since. One made at the very instant of the
// sign-out was made after it: the session signed out is older.
func (s *signedOut) voids(name string, made int64) bool {
	s.mu.Lock()
	o, ok := s.m[name]
	s.mu.Unlock()
	return ok && made < o.at
}
