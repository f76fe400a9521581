package auth

import (
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/testutil/files"
)

func usersList(data string, at time.Time) UsersList {
	return UsersList{Data: []byte(data), Hash: sha256.Sum256([]byte(data)), At: at}
}

func TestUsersListOrder(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	x, y := usersList("x", t0), usersList("y", t0)
	hi, lo := x, y
	if string(y.Hash[:]) > string(x.Hash[:]) {
		hi, lo = y, x
	}
	for _, c := range []struct {
		name  string
		l, o  UsersList
		newer bool
	}{
		{"later", usersList("x", t0.Add(time.Nanosecond)), y, true},
		{"earlier", usersList("x", t0.Add(-time.Second)), y, false},
		{"same time, greater hash", hi, lo, true},
		{"same time, smaller hash", lo, hi, false},
		{"the same list", x, x, false},
	} {
		if got := c.l.NewerThan(c.o); got != c.newer {
			t.Errorf("%s: NewerThan = %v", c.name, got)
		}
	}
}

// TestTakeUsers: a list another replica sent is put in force only when
// newer than the one in force (its own file's stamped with the file's
// modification time), as a reload is: the people it drops are refused,
// OnUsersChanged is called, and OnUsersLoaded isn't (it isn't sent on). A
// list that doesn't parse, or whose hash isn't its bytes', leaves the one
// in force. Then the own file changing to the same bytes does nothing,
// and changing to others puts them in force as newest.
func TestTakeUsers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "users.yaml")
	both := "- name: alice\n  token: " + tokAlice + "\n- name: bob\n  token: " + tokBob + "\n"
	files.Replace(t, path, both)
	mtime := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(path, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	log, logs := testLogger()
	a := newAuth(t, Config{UsersFile: path, Logger: log, Debounce: 10 * time.Millisecond, PollInterval: 50 * time.Millisecond})
	var changed, loaded atomic.Int32
	var last atomic.Pointer[UsersList]
	a.OnUsersChanged(func() { changed.Add(1) })
	a.OnUsersLoaded(func(l UsersList) { loaded.Add(1); last.Store(&l) })
	known := func(tok string) bool { _, ok, _ := a.Authenticate(bearer(tok)); return ok }

	in, ok := a.Users()
	if !ok || !in.At.Equal(mtime) || string(in.Data) != both {
		t.Fatalf("Users() = %v %v, want the file stamped %v", in.At, ok, mtime)
	}
	aliceOnly := "- name: alice\n  token: " + tokAlice + "\n"
	bad := usersList("- name: bob\n  token: short\n", mtime.Add(time.Minute))
	wrongHash := usersList(aliceOnly, mtime.Add(time.Minute))
	wrongHash.Data = []byte(both + "- name: mallory\n  token: " + tokCarol + "\n")
	for _, c := range []struct {
		name string
		l    UsersList
		err  string
	}{
		{"older", usersList(aliceOnly, mtime.Add(-time.Second)), ""},
		{"doesn't parse", bad, "needs a token of at least 32 characters"},
		{"hash not its bytes'", wrongHash, "SHA-256"},
	} {
		took, err := a.TakeUsers(c.l)
		if took || (c.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%s: TakeUsers = %v, %v", c.name, took, err)
		}
	}
	if !known(tokBob) || changed.Load() != 0 {
		t.Fatalf("a list refused changed the one in force (bob known %v, changed %d)", known(tokBob), changed.Load())
	}

	// A newer one, stamped ahead of this hub's clock, as a replica's
	// whose clock runs fast would be.
	ahead := usersList(aliceOnly, time.Now().Add(time.Hour))
	if took, err := a.TakeUsers(ahead); !took || err != nil {
		t.Fatalf("TakeUsers(newer) = %v, %v", took, err)
	}
	if known(tokBob) || !known(tokAlice) || changed.Load() != 1 || loaded.Load() != 0 {
		t.Errorf("after the newer list: bob known %v, alice %v, changed %d, loaded %d", known(tokBob), known(tokAlice), changed.Load(), loaded.Load())
	}
	if took, err := a.TakeUsers(ahead); took || err != nil {
		t.Errorf("TakeUsers(the list in force) = %v, %v", took, err)
	}
	// The same list stamped later (taken in later elsewhere) keeps the
	// later stamp, and changes nothing else.
	later := usersList(aliceOnly, ahead.At.Add(time.Minute))
	if took, err := a.TakeUsers(later); took || err != nil {
		t.Errorf("TakeUsers(the list in force, later) = %v, %v", took, err)
	}
	if in, _ := a.Users(); !in.At.Equal(later.At) || changed.Load() != 1 {
		t.Errorf("after the list in force stamped later: At %v, want %v; changed %d", in.At, later.At, changed.Load())
	}
	ahead = later

	// The own file comes round to the same bytes: nothing happens.
	files.Replace(t, path, aliceOnly)
	waitFor(t, "the file read", func() bool { return strings.Contains(logs.String(), "changed to the one in force already") })
	if changed.Load() != 1 || loaded.Load() != 0 {
		t.Errorf("the file changing to the list in force: changed %d, loaded %d", changed.Load(), loaded.Load())
	}

	// Then to another list: it is the newest, even than one stamped ahead.
	files.Replace(t, path, both)
	waitFor(t, "bob back", func() bool { return known(tokBob) })
	waitFor(t, "the list loaded told", func() bool { return loaded.Load() == 1 })
	if l := last.Load(); string(l.Data) != both || !l.NewerThan(ahead) {
		t.Errorf("OnUsersLoaded got %q at %v, want the file's, newer than %v", l.Data, l.At, ahead.At)
	}
	if in, _ := a.Users(); string(in.Data) != both {
		t.Errorf("Users() = %q", in.Data)
	}
}

func TestTakeUsersWithoutAList(t *testing.T) {
	a := newAuth(t, Config{})
	if _, ok := a.Users(); ok {
		t.Error("Users() ok without a users list")
	}
	if took, err := a.TakeUsers(usersList("- name: alice\n  token: "+tokAlice+"\n", time.Now())); took || !errors.Is(err, ErrNoUsersList) {
		t.Errorf("TakeUsers = %v, %v", took, err)
	}
}

// TestSignOutElsewhere: a sign-out calls OnSignOut's hooks; another
// replica's, taken in with SignedOutElsewhere, voids the sessions made
// before it there without calling them again; one told late doesn't
// revive sessions a later sign-out voided.
func TestSignOutElsewhere(t *testing.T) {
	clock := newFakeClock()
	key := keyFile(t, ed25519PEM(t))
	users := "- name: alice\n  token: " + tokAlice + "\n"
	a := newAuth(t, Config{Users: users, SigningKeyFile: key, TTL: 2 * time.Hour, Now: clock.Now})
	b := newAuth(t, Config{Users: users, SigningKeyFile: key, TTL: 2 * time.Hour, Now: clock.Now})
	type signOut struct {
		name      string
		at, until time.Time
	}
	var onA, onB []signOut
	a.OnSignOut(func(name string, at, until time.Time) { onA = append(onA, signOut{name, at, until}) })
	b.OnSignOut(func(name string, at, until time.Time) { onB = append(onB, signOut{name, at, until}) })

	alice, _, err := a.Authenticate(bearer(tokAlice))
	if err != nil {
		t.Fatal(err)
	}
	session, _, err := a.IssueSession(alice)
	if err != nil {
		t.Fatal(err)
	}
	inSession, ok, err := b.Authenticate(bearer(session))
	if !ok || err != nil {
		t.Fatalf("b takes a's session: %v %v", ok, err)
	}
	clock.Advance(time.Second)
	a.EndSessions(inSession)
	if len(onA) != 1 || onA[0].name != "alice" || !onA[0].at.Equal(clock.Now()) || !onA[0].until.Equal(clock.Now().Add(2*time.Hour)) {
		t.Fatalf("OnSignOut got %+v", onA)
	}
	if _, ok, _ := b.Authenticate(bearer(session)); !ok {
		t.Fatal("b refused the session before it was told")
	}
	b.SignedOutElsewhere(onA[0].name, onA[0].at, onA[0].until)
	if _, ok, err := b.Authenticate(bearer(session)); ok || !errors.Is(err, ErrInvalidToken) {
		t.Errorf("b took the session signed out on a: %v %v", ok, err)
	}
	if len(onB) != 0 {
		t.Errorf("SignedOutElsewhere called OnSignOut: %+v", onB)
	}

	// A sign-out from before, told late, leaves the later one in force.
	b.SignedOutElsewhere("alice", onA[0].at.Add(-time.Minute), onA[0].until)
	if _, ok, _ := b.Authenticate(bearer(session)); ok {
		t.Error("a sign-out told late revived the session")
	}
	// A session made since holds.
	clock.Advance(time.Second)
	fresh, _, err := a.IssueSession(alice)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := b.Authenticate(bearer(fresh)); !ok {
		t.Errorf("b refused a session made after the sign-out: %v", err)
	}
}
