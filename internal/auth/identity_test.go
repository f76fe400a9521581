package auth

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestCheckIdentity(t *testing.T) {
	for _, tc := range []struct {
		name   string
		groups []string
		want   string // "" for no error
	}{
		{"alice@example.com", []string{"dev", "platform team"}, ""},
		{"tether:system:admin", []string{"tether:system:masters"}, ""},
		{"System:admin", nil, ""},
		{"Zoë", []string{"équipe"}, ""},
		{"محمد", []string{"開発", "dev:ops"}, ""},
		{"system:admin", nil, `the hub can't act as you in the cluster: your user name "system:admin" starts with "system:", which Kubernetes keeps for its own users and groups; ask the hub's operators to set a prefix or rename it`},
		{"system:", nil, `the hub can't act as you in the cluster: your user name "system:" starts with "system:", which Kubernetes keeps for its own users and groups; ask the hub's operators to set a prefix or rename it`},
		{"alice", []string{"dev", "system:masters"}, `the hub can't act as you in the cluster: your group "system:masters" starts with "system:", which Kubernetes keeps for its own users and groups; ask the hub's operators to set a prefix or rename it`},
		{"", nil, `the hub can't act as you in the cluster: your user name "" is empty`},
		{"alice", []string{""}, `the hub can't act as you in the cluster: your group "" is empty`},
		{" alice", nil, `the hub can't act as you in the cluster: your user name " alice" has spaces at the start or end`},
		{"alice ", nil, `the hub can't act as you in the cluster: your user name "alice " has spaces at the start or end`},
		{"alice\u00a0", nil, `the hub can't act as you in the cluster: your user name "alice\u00a0" has spaces at the start or end`},
		{"alice", []string{"dev\t"}, `the hub can't act as you in the cluster: your group "dev\t" contains control characters`},
		{"al\nice", nil, `the hub can't act as you in the cluster: your user name "al\nice" contains control characters`},
		{"al\x00ice", nil, `the hub can't act as you in the cluster: your user name "al\x00ice" contains control characters`},
		{"al\u0085ice", nil, `the hub can't act as you in the cluster: your user name "al\u0085ice" contains control characters`},
		{"al\x7fice", nil, `the hub can't act as you in the cluster: your user name "al\x7fice" contains control characters`},
		{"al\xffice", nil, `the hub can't act as you in the cluster: your user name "al\xffice" is not valid UTF-8`},
		// Issue 33: names that read as others in a log line.
		{"\u200bsystem:admin", nil, `the hub can't act as you in the cluster: your user name "\u200bsystem:admin" contains invisible formatting characters (zero-width or bidi)`},
		{"alice", []string{"system\u200d:masters"}, `the hub can't act as you in the cluster: your group "system\u200d:masters" contains invisible formatting characters (zero-width or bidi)`},
		{"alice\u202e", nil, `the hub can't act as you in the cluster: your user name "alice\u202e" contains invisible formatting characters (zero-width or bidi)`},
		{"al\u2066ice\u2069", nil, `the hub can't act as you in the cluster: your user name "al\u2066ice\u2069" contains invisible formatting characters (zero-width or bidi)`},
		{"\ufeffalice", nil, `the hub can't act as you in the cluster: your user name "\ufeffalice" contains invisible formatting characters (zero-width or bidi)`},
		{"al\u00adice", nil, `the hub can't act as you in the cluster: your user name "al\u00adice" contains invisible formatting characters (zero-width or bidi)`},
		{"alice", []string{"system\uff1amasters"}, `the hub can't act as you in the cluster: your group "system：masters" contains a fullwidth colon (U+FF1A), which reads as ":"`},
		{"al\u2028ice", nil, `the hub can't act as you in the cluster: your user name "al\u2028ice" contains control characters`},
		{"alice", []string{"dev\u2029ops"}, `the hub can't act as you in the cluster: your group "dev\u2029ops" contains control characters`},
		// Quoted values are cut, between characters: an error goes into a
		// log line and a Status message.
		{strings.Repeat("é", 1000) + "\u200b", nil, `the hub can't act as you in the cluster: your user name "` + strings.Repeat("é", 50) + `…" contains invisible formatting characters (zero-width or bidi)`},
	} {
		err := CheckIdentity(tc.name, tc.groups)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q %q: %v", tc.name, tc.groups, err)
		case tc.want != "" && (err == nil || err.Error() != tc.want):
			t.Errorf("%q %q:\n got %v\nwant %s", tc.name, tc.groups, err, tc.want)
		case err != nil && !errors.Is(err, ErrIdentity):
			t.Errorf("%v is not ErrIdentity", err)
		}
	}
}

func TestImpersonated(t *testing.T) {
	p := Person{Name: "alice", Groups: []string{"dev", "ops"}, Source: SourceOIDC}
	user, groups := Config{}.Impersonated(p)
	if user != "alice" || !slices.Equal(groups, []string{"dev", "ops"}) {
		t.Errorf("no prefix: %q %q", user, groups)
	}
	user, groups = Config{UserPrefix: "oidc:", GroupPrefix: "oidc-group:"}.Impersonated(p)
	if user != "oidc:alice" || !slices.Equal(groups, []string{"oidc-group:dev", "oidc-group:ops"}) {
		t.Errorf("prefixed: %q %q", user, groups)
	}
	groups[0] = "changed"
	if p.Groups[0] != "dev" {
		t.Error("Impersonated shares its groups with the person")
	}
	// A prefix makes a system: name safe to impersonate.
	if err := CheckIdentity(Config{UserPrefix: "tether:", GroupPrefix: "tether:"}.Impersonated(Person{Name: "system:admin", Groups: []string{"system:masters"}})); err != nil {
		t.Error(err)
	}
}
