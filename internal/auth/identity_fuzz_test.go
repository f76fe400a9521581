package auth

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// FuzzCheckIdentity: whoever a person says they are (an auth proxy's header,
// an OIDC claim), the hub impersonates only names and groups that are safe
// header values and that Kubernetes doesn't keep for itself.
func FuzzCheckIdentity(f *testing.F) {
	for _, s := range [][4]string{
		{"alice", "dev", "", ""}, {"system:admin", "dev", "", ""}, {"alice", "system:masters", "", ""},
		{"admin", "masters", "system:", ""}, {"alice", "masters", "", "system:"}, {" alice", "dev", "", ""},
		{"alice\r\nImpersonate-Group: system:masters", "dev", "", ""}, {"al\x00ice", "dev", "", ""},
		{"alice", "dev\u0085", "", ""}, {"\xff", "dev", "", ""}, {"", "dev", "", ""}, {"alice", "", "tether:", "tether:"},
		{"system\u200b:admin", "dev", "", ""}, {"SYSTEM:admin", "dev", "", ""}, {"\u200bsystem:admin", "dev", "", ""},
		{"alice", "system\uff1amasters", "", ""}, {"alice\u202e", "dev", "", ""}, {"alice", "dev\u2028", "", ""},
	} {
		f.Add(s[0], s[1], s[2], s[3])
	}
	f.Fuzz(func(t *testing.T, name, group, userPrefix, groupPrefix string) {
		c := Config{UserPrefix: userPrefix, GroupPrefix: groupPrefix}
		user, groups := c.Impersonated(Person{Name: name, Groups: []string{group}})
		err := CheckIdentity(user, groups)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error on more than one line: %q", err)
			}
			if len(err.Error()) > 1024 {
				t.Fatalf("error of %d bytes: the value it quotes isn't cut", len(err.Error()))
			}
			return
		}
		for _, v := range append([]string{user}, groups...) {
			if strings.HasPrefix(v, "system:") || v == "" || !utf8.ValidString(v) || strings.ContainsFunc(v, unicode.IsControl) ||
				strings.TrimSpace(v) != v || !validHeaderValue(v) ||
				strings.ContainsFunc(v, func(r rune) bool { return unicode.Is(unicode.Cf, r) || r == '\uff1a' || r == '\u2028' || r == '\u2029' }) {
				t.Fatalf("accepted %q", v)
			}
		}
	})
}

// validHeaderValue is RFC 9110's field-value: no control bytes but tab.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if b := v[i]; b < ' ' && b != '\t' || b == 0x7f {
			return false
		}
	}
	return true
}
