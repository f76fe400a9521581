package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strings"
	"testing"

	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/listfile"
	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: run starts one
// to wait for signals.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestToken(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"token", "--name", "private-eu"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	m := regexp.MustCompile(`(?s)TETHER_AGENT_TOKEN.*?\n  ([0-9a-f]{64})\n.*SHA-256:\n  ([0-9a-f]{64})\n.*agents list.*?:\n(.*)$`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("unexpected output:\n%s", out.String())
	}
	token, sum, entry := m[1], m[2], m[3]
	want := sha256.Sum256([]byte(token))
	if sum != hex.EncodeToString(want[:]) {
		t.Errorf("printed hash %s is not the SHA-256 of the token's text", sum)
	}
	list, err := fleet.ParseAgents("entry", []byte(entry))
	if err != nil || len(list) != 1 || list[0].Name != "private-eu" || !list[0].AcceptsHash(listfile.HashToken(token)) {
		t.Errorf("the printed entry %q doesn't admit the token: %v", entry, err)
	}

	out.Reset()
	run([]string{"token"}, &out, &errOut)
	if !strings.Contains(out.String(), "- name: in-cluster\n") || strings.Contains(out.String(), token) {
		t.Errorf("a second token: the default name, and a new token:\n%s", out.String())
	}
	if code := run([]string{"token", "--name", "Bad_Name"}, &out, &errOut); code == 0 || !strings.Contains(errOut.String(), `"Bad_Name" is not a DNS label`) {
		t.Errorf("a bad name: exit %d, %q", code, errOut.String())
	}
}

func TestUsage(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(nil, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "tether hub") {
		t.Errorf("no command: exit %d, %q", code, errOut.String())
	}
	if code := run([]string{"launch"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), `unknown command "launch"`) {
		t.Errorf("unknown command: exit %d, %q", code, errOut.String())
	}
	out.Reset()
	if code := run([]string{"version"}, &out, &errOut); code != 0 || !strings.HasPrefix(out.String(), "tether v") {
		t.Errorf("version: exit %d, %q", code, out.String())
	}
	// Anything after a command or its flags is a mistake, said, not
	// ignored: a dev hub started on the default address while the person
	// meant another, say.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"hub", "extra"}, `tether hub takes no arguments (its settings are TETHER_… environment variables), not ["extra"]`},
		{[]string{"version", "extra"}, `tether version takes no arguments`},
		{[]string{"dev", "extra"}, `tether dev takes only flags (see tether dev --help), not ["extra"]`},
		{[]string{"dev", "--addr", "127.0.0.1:18080", "addr=x"}, `not ["addr=x"]`},
		{[]string{"token", "--name", "eu-1", "eu-2"}, `tether token takes only flags (see tether token --help), not ["eu-2"]`},
	} {
		errOut.Reset()
		out.Reset()
		if code := run(tc.args, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), tc.want) || out.Len() != 0 {
			t.Errorf("%q: exit %d, %q, want exit 1 and %q, nothing on stdout", tc.args, code, errOut.String(), tc.want)
		}
	}
	// Asking for help is no mistake: exit 0, with the usage.
	for _, args := range [][]string{{"--help"}, {"hub", "--help"}, {"agent", "-h"}} {
		out.Reset()
		if code := run(args, &out, &errOut); code != 0 || !strings.Contains(out.String(), "docs/SETTINGS.md") {
			t.Errorf("%v: exit %d, %q", args, code, out.String())
		}
	}
	for _, args := range [][]string{{"token", "-h", "-name"}, {"dev", "--help", "-addr"}} {
		errOut.Reset()
		if code := run(args[:2], &out, &errOut); code != 0 || !strings.Contains(errOut.String(), args[2]) {
			t.Errorf("%v: exit %d, %q", args, code, errOut.String())
		}
	}
}

// TestTokenPerson: --person makes a person's token, and the users-list entry
// it prints admits that token for that name and those groups; the agents'
// mode is unchanged, and the two don't mix.
func TestTokenPerson(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"token", "--person", "alice@example.com", "--groups", "platform, oncall"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	m := regexp.MustCompile(`(?s)"alice@example.com"'s bearer token.*?\n  ([0-9a-f]{64})\n.*SHA-256:\n  ([0-9a-f]{64})\n.*users list \(TETHER_USERS or TETHER_USERS_FILE\):\n(.*)$`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("unexpected output:\n%s", out.String())
	}
	token, sum, entry := m[1], m[2], m[3]
	want := sha256.Sum256([]byte(token))
	if sum != hex.EncodeToString(want[:]) {
		t.Errorf("printed hash %s is not the SHA-256 of the token's text", sum)
	}
	list, err := auth.ParseUsers(auth.SettingUsers, []byte(entry))
	if err != nil || len(list) != 1 || list[0].Name != "alice@example.com" || strings.Join(list[0].Groups, ",") != "platform,oncall" ||
		len(list[0].TokenHashes) != 1 || list[0].TokenHashes[0] != listfile.HashToken(token) {
		t.Errorf("the printed entry %q doesn't admit the token as alice in platform and oncall: %v %+v", entry, err, list)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"token", "--person", "bob", "--name", "eu-1"}, "--name (an agent's token) or --person (a person's), not both"},
		{[]string{"token", "--name", "eu-1", "--groups", "ops"}, "--groups goes with --person"},
		{[]string{"token", "--person", "system:admin"}, `"system:admin") has a name that starts with "system:"`},
		{[]string{"token", "--person", "carol", "--groups", "system:masters"}, `groups[0] of "system:masters"`},
		{[]string{"token", "--name", "alice@example.com"}, "for a person's token, use --person"},
	} {
		out.Reset()
		errOut.Reset()
		if code := run(tc.args, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), tc.want) || out.Len() != 0 {
			t.Errorf("%q: exit %d, %q, want exit 1 and %q, nothing on stdout", tc.args, code, errOut.String(), tc.want)
		}
	}
}
