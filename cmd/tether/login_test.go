package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestLoginCommands: the commands' flags and the errors a person meets
// before signing in. The sign-ins themselves are test/e2e's
// TestLoginTokenFile and TestLoginBrowser.
func TestLoginCommands(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	t.Setenv("HOME", t.TempDir())
	for _, tc := range []struct {
		args []string
		code int
		want string // in standard error, or standard output for 0
	}{
		{[]string{"login"}, 1, "tether login needs --hub"},
		{[]string{"login", "--hub", "tether.example.com", "--token-file", "f"}, 1, "must be the hub's URL"},
		{[]string{"login", "--hub", "https://tether.example.com", "--token-file", "/nonexistent/token"}, 1, "read token"},
		{[]string{"login", "--hub", "https://tether.example.com", "extra"}, 1, "takes only flags"},
		{[]string{"credential", "--hub", "https://tether.example.com"}, 1, "You're not signed in to https://tether.example.com: run tether login --hub https://tether.example.com"},
		{[]string{"logout", "--hub", "https://tether.example.com/"}, 0, "You weren't signed in to https://tether.example.com."},
	} {
		var out, errOut bytes.Buffer
		code := run(tc.args, &out, &errOut)
		got := errOut.String()
		if tc.code == 0 {
			got = out.String()
		}
		if code != tc.code || !strings.Contains(got, tc.want) {
			t.Errorf("tether %v: exit %d, %q; want %d, %q", tc.args, code, got, tc.code, tc.want)
		}
	}
}
