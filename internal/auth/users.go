package auth

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/tetherhq/tether/internal/listfile"
)

var userFields = []string{"name", "tokenSha256", "token", "groups", "limits"}

// limitKeys are the keys of a user entry's limits, each a Limits field.
var limitKeys = []string{"requests", "watches", "sessions"}

// User is one entry of the users list: a person who signs in with a static bearer token.
type User struct {
	// Name is the person's name as Kubernetes will see it, before any prefix.
	Name string
	// Groups are the person's groups, before any prefix; nil when the entry has none.
	Groups []string
	// TokenHashes are the SHA-256 of the person's tokens: one, or two while one is rotated.
	TokenHashes []listfile.Hash
	// Limits are the person's own bounds on what they hold open at once on each cluster, where
	// the hub's defaults are too few for them (Argo CD's watches, say); zero fields take the
	// hub's.
	Limits Limits
}

// Limits bound what one person holds open at once on one cluster: requests (but watches and
// upgraded sessions), watches, and upgraded sessions (exec, attach, port-forward). Zero means
// the hub's default for that kind.
type Limits struct {
	Requests, Watches, Sessions int
}

// ParseUsers reads a users list; setting is what its errors name (SettingUsers or
// SettingUsersFile). See the package doc for the format. Its errors are *listfile.ListError, one
// line each, naming the entry; none contains a token.
func ParseUsers(setting string, data []byte) ([]User, error) {
	return parseUsers(setting, data, Config{})
}

// parseUsers is ParseUsers that also refuses names and groups the hub could never impersonate
// once c's prefixes are added: better at start than as a 403 on every request.
func parseUsers(setting string, data []byte, c Config) ([]User, error) {
	spec := listfile.ListSpec{Setting: setting, Fields: userFields, Example: "alice@example.com"}
	list := []User{}
	owner := map[listfile.Hash]int{}
	err := listfile.ParseList(spec, data, func(e *listfile.Entry) error {
		u := User{Name: e.Name()}
		if err := checkText(u.Name); err != nil {
			return e.Errorf("has a name that %s; write it as Kubernetes should see it.", err)
		}
		var err error
		if u.TokenHashes, err = e.TokenHashes(); err != nil {
			return err
		}
		if u.Groups, _, err = e.Strings("groups"); err != nil {
			return err
		}
		limits, _, err := e.Counts("limits", limitKeys)
		if err != nil {
			return err
		}
		u.Limits = Limits{Requests: limits["requests"], Watches: limits["watches"], Sessions: limits["sessions"]}
		for i, g := range u.Groups {
			if err := checkText(g); err != nil {
				return e.Errorf("has a groups[%d] of %q, which %s.", i, g, err)
			}
		}
		if strings.HasPrefix(c.UserPrefix+u.Name, "system:") {
			return e.Errorf("has a name that starts with \"system:\", which Kubernetes keeps for itself; rename it, or set %s.", SettingUserPrefix)
		}
		for i, g := range u.Groups {
			if strings.HasPrefix(c.GroupPrefix+g, "system:") {
				return e.Errorf("has a groups[%d] of %q, which starts with \"system:\", which Kubernetes keeps for itself; remove it, or set %s.", i, g, SettingGroupPrefix)
			}
		}
		for _, h := range u.TokenHashes {
			if j, dup := owner[h]; dup {
				return e.Errorf("has the same token as %s[%d] (%q); each person needs a token of their own.", setting, j, list[j].Name)
			}
			owner[h] = e.Index()
		}
		list = append(list, u)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return list, nil
}

// UsersEntry renders the users-list entry for a person called name, in groups, whose token has
// the SHA-256 tokenSHA256, ready to append to the list (`tether token --person`). It returns an
// error, naming what is wrong, when the hub would refuse the entry: it is read back by ParseUsers.
func UsersEntry(name, tokenSHA256 string, groups []string) (string, error) {
	// By hand, not a marshalled map, for the order people read: the name first.
	var b strings.Builder
	scalar := func(v string) string {
		out, err := yaml.Marshal(v)
		if err != nil {
			return strconv.Quote(v) // can't happen for a string; %q is valid YAML for printable text
		}
		return strings.TrimSuffix(string(out), "\n")
	}
	fmt.Fprintf(&b, "- name: %s\n  tokenSha256: %s\n", scalar(name), scalar(tokenSHA256))
	if len(groups) > 0 {
		b.WriteString("  groups:\n")
		for _, g := range groups {
			fmt.Fprintf(&b, "  - %s\n", scalar(g))
		}
	}
	out := b.String()
	list, err := ParseUsers("the entry", []byte(out))
	if err != nil {
		return "", err
	}
	// YAML must read back exactly what was given: a name YAML would turn into something else
	// is a mistake to say, not an entry for someone else.
	if len(list) != 1 || list[0].Name != name || !slices.Equal(list[0].Groups, groups) {
		return "", fmt.Errorf("users entry: %q with groups %q doesn't read back as written", name, groups)
	}
	return out, nil
}

// users holds the users list in force. A nil *users is a hub without one: it knows no token.
type users struct {
	cur     atomic.Pointer[userIndex]
	path    string // the file watch follows, or "" for a list from TETHER_USERS
	setting string // what its errors name
	loaded  []byte // the file's content when loadUsers read it
	// changed is called after each reload, once the new list is in force: the hub ends what
	// people it no longer admits still hold open (Authenticator.OnUsersChanged).
	changed func()
	// loadedHook is called after a reload of this hub's own file: the other replicas are told
	// (Authenticator.OnUsersLoaded).
	loadedHook func(UsersList)

	mu   sync.Mutex // guards list, and makes each change of the list in force one step
	list UsersList  // the list in force, as replicas share it
}

// loadUsers reads the users list from cfg, or returns nil when none is set.
func loadUsers(cfg Config) (*users, error) {
	src, ok, err := listfile.ReadSource(SettingUsers, cfg.Users, cfg.UsersFile)
	if err != nil || !ok {
		return nil, err
	}
	list, err := parseUsers(src.Setting, src.Data, cfg)
	if err != nil {
		return nil, err
	}
	u := &users{path: src.Path, setting: src.Setting, loaded: src.Data}
	u.replace(list)
	// When the content was taken in: the file's modification time, so a
	// replica restarted with a volume the kubelet hasn't updated yet
	// doesn't take its old list for news (decision 034).
	u.list = UsersList{Data: src.Data, Hash: sha256.Sum256(src.Data), At: cfg.now()}
	if src.Path != "" {
		if fi, err := os.Stat(src.Path); err == nil {
			u.list.At = fi.ModTime()
		}
	}
	return u, nil
}

// userIndex is one users list, by token hash and by name (names are unique).
type userIndex struct {
	byHash map[listfile.Hash]*User
	byName map[string]*User
}

func (u *users) replace(list []User) {
	idx := userIndex{byHash: make(map[listfile.Hash]*User, len(list)), byName: make(map[string]*User, len(list))}
	for i := range list {
		idx.byName[list[i].Name] = &list[i]
		for _, h := range list[i].TokenHashes {
			idx.byHash[h] = &list[i]
		}
	}
	u.cur.Store(&idx)
}

// lookup finds the user whose token this is, and returns the token's hash too. It looks the
// hash up in a map rather than comparing in constant time: the hash of a secret with at least 32
// characters leaks nothing useful through timing, and the lookup must cost the same for
// thousands of users as for one.
func (u *users) lookup(token string) (User, listfile.Hash, bool) {
	if u == nil {
		return User{}, listfile.Hash{}, false
	}
	h := listfile.HashToken(token)
	found, ok := u.cur.Load().byHash[h]
	if !ok {
		return User{}, listfile.Hash{}, false
	}
	return *found, h, true
}

// named finds the user with this name in the list in force.
func (u *users) named(name string) (User, bool) {
	if u == nil {
		return User{}, false
	}
	found, ok := u.cur.Load().byName[name]
	if !ok {
		return User{}, false
	}
	return *found, true
}

// watch follows the users file until ctx is done. A list that doesn't parse, or a file that
// can't be read, leaves the last good list in force, and the reason is logged.
func (u *users) watch(ctx context.Context, cfg Config, log *slog.Logger) {
	opts := listfile.WatchOptions{Debounce: cfg.Debounce, PollInterval: cfg.PollInterval, Initial: u.loaded,
		Unwatched: func(err error) {
			log.Warn("Can't watch the users list's directory; reading the file every minute instead", "file", u.path, "err", err)
		}}
	err := listfile.WatchFile(ctx, u.path, opts, func(data []byte, err error) {
		if err != nil {
			log.Warn("Can't read the users list; keeping the last good one", "file", u.path, "err", err)
			return
		}
		hash := sha256.Sum256(data)
		u.mu.Lock()
		if hash == u.list.Hash {
			// Another replica gave it already: said at Info, as the
			// file's own change would be, so that operators (and tests)
			// see the file catch up.
			u.mu.Unlock()
			log.Info("The users list changed to the one in force already", "file", u.path)
			return
		}
		list, err := parseUsers(SettingUsersFile, data, cfg)
		if err != nil {
			u.mu.Unlock()
			log.Warn("The users list has an error; keeping the last good one", "file", u.path, "err", err)
			return
		}
		// A change seen now is newer than any list in force, even one
		// stamped by a replica whose clock is ahead.
		in := UsersList{Data: data, Hash: hash, At: cfg.now()}
		if !in.At.After(u.list.At) {
			in.At = u.list.At.Add(time.Nanosecond)
		}
		u.replace(list)
		u.list = in
		u.mu.Unlock()
		log.Info("Reloaded the users list", "file", u.path, "users", len(list))
		if u.changed != nil {
			u.changed()
		}
		if u.loadedHook != nil {
			u.loadedHook(in)
		}
	})
	if err != nil {
		log.Warn("Can't watch the users list; changes to it need a hub restart", "file", u.path, "err", err)
	}
}
