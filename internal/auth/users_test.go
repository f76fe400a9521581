package auth

import (
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/testutil/files"

	"github.com/tetherhq/tether/internal/listfile"
)

var (
	tokAlice = strings.Repeat("a", 64)
	tokBob   = strings.Repeat("b", 64)
	tokBob2  = strings.Repeat("c", 64)
	tokCarol = "carol-token-with-enough-characters-in-it"
)

func sha(tok string) string { return listfile.TokenSHA256(tok) }

func TestParseUsersErrors(t *testing.T) {
	h := sha(tokAlice)
	for _, tc := range []struct {
		name, list, want string
	}{
		{"not a list", "name: alice", `TETHER_USERS must be a YAML list of entries, each like "- name: alice@example.com", or that YAML base64-encoded; it is a mapping.`},
		{"no name", "- tokenSha256: " + h, `TETHER_USERS[0] needs a name, like "name: alice@example.com".`},
		{"no token", "- name: alice", `TETHER_USERS[0] ("alice") needs a token of at least 32 characters, or its tokenSha256.`},
		{"short token", "- name: alice\n  token: secret", `TETHER_USERS[0] ("alice") needs a token of at least 32 characters, or its tokenSha256.`},
		{"three hashes", "- name: alice\n  tokenSha256: [" + h + ", " + sha(tokBob) + ", " + sha(tokCarol) + "]", `TETHER_USERS[0] ("alice") has 3 tokenSha256 values; give one, or two while a token is being rotated.`},
		{"unknown field", "- name: alice\n  tokenSha256: " + h + "\n  labels: {a: b}", `TETHER_USERS[0] ("alice") has an unknown field "labels"; the fields are name, tokenSha256, token, groups and limits.`},
		{"typo", "- name: alice\n  tokenSha256: " + h + "\n  Groups: [a]", `TETHER_USERS[0] ("alice") has an unknown field "Groups" (did you mean "groups"?); the fields are name, tokenSha256, token, groups and limits.`},
		{"duplicate name", "- name: alice\n  tokenSha256: " + h + "\n- name: alice\n  token: " + tokBob, `TETHER_USERS[1] ("alice") has the same name as TETHER_USERS[0]; names must be unique.`},
		{"same token", "- name: alice\n  tokenSha256: " + h + "\n- name: bob\n  token: " + tokAlice, `TETHER_USERS[1] ("bob") has the same token as TETHER_USERS[0] ("alice"); each person needs a token of their own.`},
		{"groups not a list", "- name: alice\n  token: " + tokAlice + "\n  groups: admins", `TETHER_USERS[0] ("alice") needs groups to be a list; it is text.`},
		{"empty group", "- name: alice\n  token: " + tokAlice + "\n  groups: [dev, '']", `TETHER_USERS[0] ("alice") has an empty groups[1]; remove it.`},
		{"groups null", "- name: alice\n  token: " + tokAlice + "\n  groups:", `TETHER_USERS[0] ("alice") has no value for groups; give it one, or leave it out.`},
		{"name with spaces", "- name: ' alice'\n  token: " + tokAlice, `TETHER_USERS[0] (" alice") has a name that has spaces at the start or end; write it as Kubernetes should see it.`},
		{"name with control", "- name: \"al\\tice\"\n  token: " + tokAlice, `TETHER_USERS[0] ("al\tice") has a name that contains control characters; write it as Kubernetes should see it.`},
		{"group with control", "- name: alice\n  token: " + tokAlice + "\n  groups: [\"dev\\n\"]", `TETHER_USERS[0] ("alice") has a groups[0] of "dev\n", which contains control characters.`},
		{"zero-width name", "- name: \"\\u200bsystem:admin\"\n  token: " + tokAlice, `TETHER_USERS[0] ("\u200bsystem:admin") has a name that contains invisible formatting characters (zero-width or bidi); write it as Kubernetes should see it.`},
		{"bidi group", "- name: alice\n  token: " + tokAlice + "\n  groups: [\"dev\\u202e\"]", `TETHER_USERS[0] ("alice") has a groups[0] of "dev\u202e", which contains invisible formatting characters (zero-width or bidi).`},
		{"fullwidth colon", "- name: alice\n  token: " + tokAlice + "\n  groups: [\"system\uff1amasters\"]", `TETHER_USERS[0] ("alice") has a groups[0] of "system：masters", which contains a fullwidth colon (U+FF1A), which reads as ":".`},
		{"system name", "- name: system:admin\n  token: " + tokAlice, `TETHER_USERS[0] ("system:admin") has a name that starts with "system:", which Kubernetes keeps for itself; rename it, or set TETHER_IMPERSONATE_USER_PREFIX.`},
		{"system group", "- name: alice\n  token: " + tokAlice + "\n  groups: [dev, system:masters]", `TETHER_USERS[0] ("alice") has a groups[1] of "system:masters", which starts with "system:", which Kubernetes keeps for itself; remove it, or set TETHER_IMPERSONATE_GROUP_PREFIX.`},
		{"limits not a mapping", "- name: alice\n  token: " + tokAlice + "\n  limits: 5", `TETHER_USERS[0] ("alice") needs limits to be a mapping of requests, watches, sessions to numbers; it is a number.`},
		{"unknown limit", "- name: alice\n  token: " + tokAlice + "\n  limits: {watch: 5}", `TETHER_USERS[0] ("alice") has an unknown limits "watch"; they are requests, watches, sessions.`},
		{"zero limit", "- name: alice\n  token: " + tokAlice + "\n  limits: {watches: 0}", `TETHER_USERS[0] ("alice") needs limits.watches to be a whole number from 1 to 1000000; it is a number.`},
		{"fractional limit", "- name: alice\n  token: " + tokAlice + "\n  limits: {watches: 1.5}", `TETHER_USERS[0] ("alice") needs limits.watches to be a whole number from 1 to 1000000; it is a number.`},
		{"text limit", "- name: alice\n  token: " + tokAlice + "\n  limits: {sessions: many}", `TETHER_USERS[0] ("alice") needs limits.sessions to be a whole number from 1 to 1000000; it is text.`},
		{"limits null", "- name: alice\n  token: " + tokAlice + "\n  limits:", `TETHER_USERS[0] ("alice") has no value for limits; give it one, or leave it out.`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			list, err := ParseUsers(SettingUsers, []byte(tc.list))
			if err == nil || err.Error() != tc.want {
				t.Errorf("error:\n got %v\nwant %s", err, tc.want)
			}
			var le *listfile.ListError
			if list != nil || !errors.As(err, &le) {
				t.Errorf("list %v, error %T", list, err)
			}
			for _, tok := range []string{tokAlice, tokBob, tokCarol} {
				if err != nil && strings.Contains(err.Error(), tok) {
					t.Errorf("error shows a token: %s", err)
				}
			}
		})
	}
	// With a prefix, system: names are fine: the final name is tether:system:admin.
	a := newAuth(t, Config{Users: "- name: system:admin\n  token: " + tokAlice + "\n  groups: [system:masters]", UserPrefix: "tether:", GroupPrefix: "tether:"})
	if p, ok, _ := a.Authenticate(bearer(tokAlice)); !ok || p.Name != "system:admin" {
		t.Errorf("prefixed system name refused: %+v", p)
	}
}

func TestStaticTokens(t *testing.T) {
	list := "- name: alice@example.com\n  tokenSha256: " + strings.ToUpper(sha(tokAlice)) + "\n  groups: [platform, dev]\n" +
		"- name: bob\n  tokenSha256: [" + sha(tokBob) + ", " + sha(tokBob2) + "]\n" +
		"- name: carol\n  token: '  " + tokCarol + "  '\n  groups: []\n"
	for _, src := range []struct{ name, users string }{{"yaml", list}, {"base64", base64.StdEncoding.EncodeToString([]byte(list))}} {
		t.Run(src.name, func(t *testing.T) {
			a := newAuth(t, Config{Users: src.users})
			for _, tc := range []struct {
				token, name string
				groups      []string
			}{
				{tokAlice, "alice@example.com", []string{"platform", "dev"}},
				{tokBob, "bob", nil},
				{tokBob2, "bob", nil}, // the second hash, while bob's token is rotated
				{tokCarol, "carol", []string{}},
			} {
				p, ok, err := a.Authenticate(bearer(tc.token))
				if !ok || err != nil {
					t.Fatalf("%s: %v %v", tc.name, ok, err)
				}
				if p.Name != tc.name || !slices.Equal(p.Groups, tc.groups) || p.Source != SourceToken || p.Bearer != "" {
					t.Errorf("got %+v, want %s %v", p, tc.name, tc.groups)
				}
			}
			for _, tok := range []string{"not-a-token-anyone-has-at-all-here", tokAlice[:63], tokCarol + "x"} {
				p, ok, err := a.Authenticate(bearer(tok))
				if ok || !errors.Is(err, ErrUnknownToken) {
					t.Fatalf("unknown token: %+v %v %v", p, ok, err)
				}
				if want := `unknown bearer token: it is not in the users list, and not a JWT, so not an OIDC ID token or a hub-issued one`; err.Error() != want {
					t.Errorf("error:\n got %s\nwant %s", err, want)
				}
			}
			// The scheme is case-insensitive, spaces around the token don't count.
			if p, ok, _ := a.Authenticate(request("192.0.2.1:1", "Authorization: bearer  "+tokBob)); !ok || p.Name != "bob" {
				t.Errorf("lower-case scheme: %+v", p)
			}
		})
	}
}

func TestUsersFileReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "users.yaml")
	write := func(s string) { files.Replace(t, path, s) }
	write("- name: alice\n  token: " + tokAlice + "\n")
	log, logs := testLogger()
	a := newAuth(t, Config{UsersFile: path, Logger: log, Debounce: 10 * time.Millisecond, PollInterval: 50 * time.Millisecond})
	known := func(tok string) func() bool {
		return func() bool { _, ok, _ := a.Authenticate(bearer(tok)); return ok }
	}
	if !known(tokAlice)() {
		t.Fatal("alice unknown at start")
	}

	// Rotate alice's token: both work, then only the new one.
	write("- name: alice\n  tokenSha256: [" + sha(tokAlice) + ", " + sha(tokBob2) + "]\n")
	waitFor(t, "the second token", known(tokBob2))
	write("- name: alice\n  tokenSha256: " + sha(tokBob2) + "\n- name: bob\n  token: " + tokBob + "\n")
	waitFor(t, "bob", known(tokBob))
	if known(tokAlice)() {
		t.Error("alice's old token still works")
	}

	// A bad list keeps the last good one, and says why.
	write("- name: alice\n  token: short\n")
	waitFor(t, "the reload error in the log", func() bool {
		return strings.Contains(logs.String(), "The users list has an error; keeping the last good one")
	})
	if !known(tokBob)() {
		t.Error("a bad reload dropped the last good list")
	}
	if !strings.Contains(logs.String(), `TETHER_USERS_FILE[0] (\"alice\") needs a token of at least 32 characters`) {
		t.Errorf("log doesn't say why: %s", logs)
	}
	// A name that reads as another (issue 33) is an error like any other:
	// the last good list stays.
	write("- name: \"\\u200bsystem:admin\"\n  token: " + tokAlice + "\n")
	waitFor(t, "the invisible character in the log", func() bool {
		return strings.Contains(logs.String(), "contains invisible formatting characters")
	})
	if !known(tokBob)() || known(tokAlice)() {
		t.Error("a list with an invisible character in a name was taken")
	}
	// A missing file too.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the read error in the log", func() bool {
		return strings.Contains(logs.String(), "Can't read the users list; keeping the last good one")
	})
	if !known(tokBob)() {
		t.Error("a missing file dropped the last good list")
	}
	write("- name: carol\n  token: " + tokCarol + "\n")
	waitFor(t, "carol", known(tokCarol))
	if known(tokBob)() {
		t.Error("bob still known after he was removed")
	}
	for _, tok := range []string{tokAlice, tokBob, tokBob2, tokCarol} {
		if strings.Contains(logs.String(), tok) {
			t.Fatalf("a token reached the log: %s", logs)
		}
	}
}

// TestUsersLimits: an entry's limits are read, and given to the people it
// admits and the hub-issued tokens made from them; nobody else's.
func TestUsersLimits(t *testing.T) {
	list, err := ParseUsers(SettingUsers, []byte("- name: argocd\n  token: "+tokAlice+"\n  limits: {requests: 500, watches: 1000, sessions: 50}\n- name: bob\n  token: "+tokBob))
	if err != nil {
		t.Fatal(err)
	}
	if want := (Limits{Requests: 500, Watches: 1000, Sessions: 50}); list[0].Limits != want || list[1].Limits != (Limits{}) {
		t.Fatalf("limits %+v and %+v, want %+v and none", list[0].Limits, list[1].Limits, want)
	}
	a := newAuth(t, Config{Users: "- name: argocd\n  token: " + tokAlice + "\n  limits: {watches: 1000}"})
	p := mustAuth(t, a, tokAlice)
	if got := a.Limits(p); got.Watches != 1000 {
		t.Errorf("the list's person: %+v", got)
	}
	token, _, err := a.IssueToken(p)
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Limits(mustAuth(t, a, token)); got.Watches != 1000 {
		t.Errorf("their kubeconfig's token: %+v", got)
	}
	if got := a.Limits(Person{Name: "argocd", Source: SourceOIDC}); got != (Limits{}) {
		t.Errorf("an OIDC person of the same name: %+v", got)
	}
}

// TestUsersEntry: the entry reads back as the same person, groups and hash,
// names YAML would read as something else come out quoted, and what the hub
// would refuse is refused here.
func TestUsersEntry(t *testing.T) {
	sum := listfile.TokenSHA256("a-token-of-at-least-32-characters-long")
	for _, tc := range []struct {
		name    string
		groups  []string
		want    string // the entry, or the error
		wantErr bool
	}{
		{"alice@example.com", nil, "- name: alice@example.com\n  tokenSha256: " + sum + "\n", false},
		{"bob", []string{"platform", "oncall"}, "- name: bob\n  tokenSha256: " + sum + "\n  groups:\n  - platform\n  - oncall\n", false},
		{"on", []string{"123"}, "- name: \"on\"\n  tokenSha256: " + sum + "\n  groups:\n  - \"123\"\n", false},
		{"system:admin", nil, `starts with "system:"`, true},
		{"carol", []string{"a\tb"}, `groups[0] of "a\tb"`, true},
		{"", nil, "needs a name", true},
	} {
		got, err := UsersEntry(tc.name, sum, tc.groups)
		if tc.wantErr {
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("UsersEntry(%q, %q) = %q, %v; want an error with %q", tc.name, tc.groups, got, err, tc.want)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("UsersEntry(%q, %q) = %q, %v; want %q", tc.name, tc.groups, got, err, tc.want)
		}
	}
}
