package logging

import (
	"strings"
	"testing"
)

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://tether.example.com/base":       "https://tether.example.com/base",
		"https://me:hunter2@tether.example.com": "https://me:xxxxx@tether.example.com",
		"https://me@tether.example.com":         "https://me@tether.example.com",
		"https://me:hunter2@h.example.com/%zz":  "https://xxxxx@h.example.com/%zz",
		"https://me:hunter2@h.example.com:8x":   "https://xxxxx@h.example.com:8x",
		"me:hunter2@h.example.com":              "xxxxx@h.example.com",
		"tether.example.com":                    "tether.example.com",
		"https://h.example.com/a@b%zz":          "https://xxxxx@b%zz",
		"//@://:pass@":                          "xxxxx@",
		"@://:pass@":                            "xxxxx@",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzRedactURL: whatever the rest of a URL holds, parseable or not, its
// password is never quoted.
func FuzzRedactURL(f *testing.F) {
	f.Add("https", "me", "hunter2", "tether.example.com", "/base")
	f.Add("https", "me", "hunter2", "h.example.com:8x", "/%zz")
	f.Add("", "me", "pass", "h", "")
	f.Fuzz(func(t *testing.T, scheme, user, password, host, path string) {
		if len(password) < 4 || strings.ContainsAny(password+user+host, "@/?#") || strings.ContainsAny(scheme, "@/?#:") ||
			strings.Contains(scheme+user+host+path, password) {
			return
		}
		raw := user + ":" + password + "@" + host + path
		if scheme != "" {
			raw = scheme + "://" + raw
		}
		// The password as written: net/url escapes other parts, which can
		// spell it in other ways.
		if got := RedactURL(raw); strings.Contains(got, ":"+password+"@") {
			t.Fatalf("RedactURL(%q) = %q quotes the password", raw, got)
		}
	})
}
