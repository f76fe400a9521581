package fleet

import (
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tetherhq/tether/internal/listfile"
	"github.com/tetherhq/tether/internal/testutil/files"
)

var (
	token1 = strings.Repeat("a", 32) + "-first-token"
	token2 = strings.Repeat("b", 32) + "-second-token"
	hash1  = listfile.TokenSHA256(token1)
	hash2  = listfile.TokenSHA256(token2)
)

func TestParseAgentsErrors(t *testing.T) {
	const rule = `lower-case letters, digits and "-", starting and ending with a letter or digit ([a-z0-9]([-a-z0-9]*[a-z0-9])?), at most 63 characters`
	const fields = "the fields are name, tokenSha256, token, labels, groups, forwardToken and caSha256."
	const wantList = `TETHER_FLEET_AGENTS must be a YAML list of entries, each like "- name: private-eu", or that YAML base64-encoded; it is `
	const how = `make it with: printf %s "$TOKEN" | sha256sum`
	long := strings.Repeat("a", 64)
	for _, tc := range []struct{ name, in, want string }{
		{"no token", "- name: private-eu\n",
			`TETHER_FLEET_AGENTS[0] ("private-eu") needs a token of at least 32 characters, or its tokenSha256.`},
		{"short token", "- name: private-eu\n  token: short-secret\n",
			`TETHER_FLEET_AGENTS[0] ("private-eu") needs a token of at least 32 characters, or its tokenSha256.`},
		{"blank token", "- name: private-eu\n  token: \"   \"\n",
			`TETHER_FLEET_AGENTS[0] ("private-eu") needs a token of at least 32 characters, or its tokenSha256.`},
		{"token and hash", "- name: a\n  token: " + token1 + "\n  tokenSha256: " + hash1 + "\n",
			`TETHER_FLEET_AGENTS[0] ("a") has both a token and a tokenSha256; keep only one (tokenSha256 keeps the token itself out of the hub's settings).`},
		{"duplicate", "- {name: a, tokenSha256: " + hash1 + "}\n- {name: b, tokenSha256: " + hash1 + "}\n- {name: a, tokenSha256: " + hash2 + "}\n",
			`TETHER_FLEET_AGENTS[2] ("a") has the same name as TETHER_FLEET_AGENTS[0]; names must be unique.`},
		{"unknown field", "- name: a\n  tokenSha256: " + hash1 + "\n  region: eu\n",
			`TETHER_FLEET_AGENTS[0] ("a") has an unknown field "region"; ` + fields},
		{"unknown field, wrong case", "- name: a\n  tokenSHA256: " + hash1 + "\n",
			`TETHER_FLEET_AGENTS[0] ("a") has an unknown field "tokenSHA256" (did you mean "tokenSha256"?); ` + fields},
		{"unknown field, no name", "- nmae: a\n",
			`TETHER_FLEET_AGENTS[0] has an unknown field "nmae"; ` + fields},
		{"upper-case name", "- name: Private_EU\n  tokenSha256: " + hash1 + "\n",
			`TETHER_FLEET_AGENTS[0] ("Private_EU") needs a name that is a DNS label: ` + rule + `.`},
		{"name ends with -", "- name: eu-\n  tokenSha256: " + hash1 + "\n",
			`TETHER_FLEET_AGENTS[0] ("eu-") needs a name that is a DNS label: ` + rule + `.`},
		{"long name", "- name: " + long + "\n  tokenSha256: " + hash1 + "\n",
			`TETHER_FLEET_AGENTS[0] ("` + long + `") needs a name that is a DNS label: ` + rule + ` (it has 64).`},
		{"no name", "- tokenSha256: " + hash1 + "\n",
			`TETHER_FLEET_AGENTS[0] needs a name, like "name: private-eu".`},
		{"empty name", "- name: \"\"\n  tokenSha256: " + hash1 + "\n",
			`TETHER_FLEET_AGENTS[0] needs a name, like "name: private-eu".`},
		{"null name", "- name:\n  tokenSha256: " + hash1 + "\n",
			`TETHER_FLEET_AGENTS[0] needs a name, like "name: private-eu".`},
		{"number name", "- name: 1234\n",
			`TETHER_FLEET_AGENTS[0] has a name that YAML reads as a number, not text; put it in quotes.`},
		{"boolean name", "- name: on\n",
			`TETHER_FLEET_AGENTS[0] has a name that YAML reads as true or false, not text; put it in quotes.`},
		{"short hash", "- name: a\n  tokenSha256: abc123\n",
			`TETHER_FLEET_AGENTS[0] ("a") has a tokenSha256 that is not 64 hex characters: it has 6, 0 of them not hex digits (not quoted, as it may be the token itself: that goes in token); ` + how},
		{"hash not hex", "- name: a\n  tokenSha256: " + strings.Repeat("g", 64) + "\n",
			`TETHER_FLEET_AGENTS[0] ("a") has a tokenSha256 that is not 64 hex characters: it has 64, 64 of them not hex digits (not quoted, as it may be the token itself: that goes in token); ` + how},
		{"sha256sum output pasted", "- name: a\n  tokenSha256: \"" + hash1 + "  -\"\n",
			`TETHER_FLEET_AGENTS[0] ("a") has a tokenSha256 that is not 64 hex characters: it has 67, 3 of them not hex digits (not quoted, as it may be the token itself: that goes in token); ` + how},
		{"token pasted as its hash, not quoted", "- name: a\n  tokenSha256: s3cret-token-pasted-in-the-wrong-field-xyz\n",
			`TETHER_FLEET_AGENTS[0] ("a") has a tokenSha256 that is not 64 hex characters: it has 42, 31 of them not hex digits (not quoted, as it may be the token itself: that goes in token); ` + how},
		{"malformed hash in a list", "- name: a\n  tokenSha256: [" + hash1 + ", xyz]\n",
			`TETHER_FLEET_AGENTS[0] ("a") has a tokenSha256 that is not 64 hex characters: it has 3, 3 of them not hex digits (not quoted, as it may be the token itself: that goes in token); ` + how},
		{"three hashes", "- name: a\n  tokenSha256: [" + hash1 + ", " + hash2 + ", " + hash1 + "]\n",
			`TETHER_FLEET_AGENTS[0] ("a") has 3 tokenSha256 values; give one, or two while a token is being rotated.`},
		{"no hashes", "- name: a\n  tokenSha256: []\n",
			`TETHER_FLEET_AGENTS[0] ("a") has 0 tokenSha256 values; give one, or two while a token is being rotated.`},
		{"hash as a mapping", "- name: a\n  tokenSha256: {x: y}\n",
			`TETHER_FLEET_AGENTS[0] ("a") needs a tokenSha256 as text; it is a mapping.`},
		{"token as a number", "- name: a\n  token: 123456789012345678901234567890123\n",
			`TETHER_FLEET_AGENTS[0] ("a") has a token that YAML reads as a number, not text; put it in quotes.`},
		{"malformed caSha256", "- name: a\n  tokenSha256: " + hash1 + "\n  caSha256: nope\n",
			`TETHER_FLEET_AGENTS[0] ("a") has a caSha256 of "nope", which is not 64 hex characters; make it with: sha256sum ca.crt`},
		{"groups with no value", "- name: a\n  tokenSha256: " + hash1 + "\n  groups:\n",
			`TETHER_FLEET_AGENTS[0] ("a") has no value for groups; leave groups out to let everyone signed in see this cluster, or write "groups: []" to let no one.`},
		{"groups not a list", "- name: a\n  tokenSha256: " + hash1 + "\n  groups: admins\n",
			`TETHER_FLEET_AGENTS[0] ("a") needs groups to be a list; it is text.`},
		{"empty group", "- name: a\n  tokenSha256: " + hash1 + "\n  groups: [admins, \"\"]\n",
			`TETHER_FLEET_AGENTS[0] ("a") has an empty groups[1]; remove it.`},
		{"labels not a mapping", "- name: a\n  tokenSha256: " + hash1 + "\n  labels: [eu]\n",
			`TETHER_FLEET_AGENTS[0] ("a") needs labels to be a mapping of names to text; it is a list.`},
		{"label not text", "- name: a\n  tokenSha256: " + hash1 + "\n  labels: {tier: 1}\n",
			`TETHER_FLEET_AGENTS[0] ("a") has labels["tier"] that YAML reads as a number, not text; put it in quotes.`},
		{"labels with no value", "- name: a\n  tokenSha256: " + hash1 + "\n  labels:\n",
			`TETHER_FLEET_AGENTS[0] ("a") has no value for labels; give it one, or leave it out.`},
		{"forwardToken not a boolean", "- name: a\n  tokenSha256: " + hash1 + "\n  forwardToken: sometimes\n",
			`TETHER_FLEET_AGENTS[0] ("a") needs forwardToken to be true or false; it is text.`},
		{"entry not a mapping", "- {name: a, tokenSha256: " + hash1 + "}\n- private-eu\n",
			`TETHER_FLEET_AGENTS[1] must be a mapping of fields (name: …); it is text.`},
		{"entry a list", "- [a, b]\n",
			`TETHER_FLEET_AGENTS[0] must be a mapping of fields (name: …); it is a list.`},
		{"a mapping", "name: a\ntokenSha256: " + hash1 + "\n", wantList + "a mapping."},
		{"text", "private eu", wantList + "text."},
		{"empty", "  \n", wantList + "empty."},
		{"base64 of a mapping", base64.StdEncoding.EncodeToString([]byte("name: a\n")), wantList + "base64 of a mapping."},
		{"base64 of binary", base64.StdEncoding.EncodeToString([]byte{0xff, 0xfe, 0x00}), wantList + "neither."},
		{"bad base64", "bmFtZTogYQo=bmFt",
			`TETHER_FLEET_AGENTS looks like base64 but doesn't decode (illegal base64 data at input byte 11); give the YAML list itself, or its base64 on one line (base64 -w0).`},
		{"base64 of bad YAML", base64.StdEncoding.EncodeToString([]byte("- name: [a\n")),
			`TETHER_FLEET_AGENTS is base64 of text that is not valid YAML at line 1: check its indentation, its dashes and its quoting.`},
		{"bad YAML", "- name: a\n name: b\n",
			`TETHER_FLEET_AGENTS is not valid YAML at line 1: check its indentation, its dashes and its quoting.`},
		{"key a mapping", "- name: a\n  ? {token: " + token1 + "}\n  : x\n",
			`TETHER_FLEET_AGENTS is not valid YAML: a mapping has a key that is not text (a list, a mapping or empty).`},
		{"key empty", "- name: a\n  ~: {token: " + token1 + "}\n",
			`TETHER_FLEET_AGENTS is not valid YAML: a mapping has a key that is not text (a list, a mapping or empty).`},
		{"value that doesn't match its tag", "- name: a\n  token: !!int " + token1 + "\n",
			`TETHER_FLEET_AGENTS is not valid YAML: a value doesn't match its tag (like !!int).`},
		{"key twice", "- name: a\n  name: b\n",
			`TETHER_FLEET_AGENTS is not valid YAML at line 2: a mapping has the same key twice.`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			list, err := ParseAgents(SettingAgents, []byte(tc.in))
			if err == nil {
				t.Fatalf("accepted %q: %+v", tc.in, list)
			}
			if err.Error() != tc.want {
				t.Fatalf("error\n got: %s\nwant: %s", err, tc.want)
			}
			var le *listfile.ListError
			if !errors.As(err, &le) || le.Setting != SettingAgents {
				t.Fatalf("error is %T, want *listfile.ListError naming %s", err, SettingAgents)
			}
			for _, tok := range []string{token1, token2, "short-secret"} {
				if strings.Contains(err.Error(), tok) {
					t.Fatalf("error shows a token: %s", err)
				}
			}
		})
	}
}

func TestParseAgentsValid(t *testing.T) {
	yaml := `
- name: private-eu
  tokenSha256: ` + strings.ToUpper(hash1) + `
  labels: {region: eu, tier: "1"}
  groups: [platform, sre]
  forwardToken: true
  caSha256: ` + hash2 + `
- name: rotating
  tokenSha256: [` + hash1 + `, ` + hash2 + `]
- name: hidden
  token: "  ` + token1 + `  "
  groups: []
- name: "0"
  tokenSha256: [` + hash2 + `]
`
	want := []Agent{
		{Name: "private-eu", TokenHashes: hashes(hash1), Labels: map[string]string{"region": "eu", "tier": "1"},
			Groups: Groups{Names: []string{"platform", "sre"}}, ForwardToken: true, CASHA256: hash2},
		{Name: "rotating", TokenHashes: hashes(hash1, hash2), Groups: Groups{Everyone: true}},
		{Name: "hidden", TokenHashes: hashes(hash1), Groups: Groups{Names: []string{}}},
		{Name: "0", TokenHashes: hashes(hash2), Groups: Groups{Everyone: true}},
	}
	urlB64 := base64.RawURLEncoding.EncodeToString([]byte(yaml + "#~~~?"))
	if !strings.ContainsAny(urlB64, "-_") {
		t.Fatal("the URL-alphabet case doesn't use the URL alphabet")
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "agents.yaml")
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		value, file string
	}{
		{"YAML", yaml, ""},
		{"base64", base64.StdEncoding.EncodeToString([]byte(yaml)), ""},
		{"base64, URL alphabet, unpadded, wrapped", wrap(urlB64), ""},
		{"file", "", file},
		{"file with base64", "", writeFile(t, dir, "b64.yaml", base64.StdEncoding.EncodeToString([]byte(yaml))+"\n")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			agents, err := Load(Config{Agents: tc.value, AgentsFile: tc.file})
			if err != nil {
				t.Fatal(err)
			}
			if got := agents.List(); !reflect.DeepEqual(got, want) {
				t.Fatalf("got  %+v\nwant %+v", got, want)
			}
		})
	}
	// "groups: []" must stay distinct from no groups: no one versus everyone.
	agents := New(want)
	if a, _ := agents.Lookup("hidden"); a.Groups.Allows([]string{"platform"}) || a.Groups.Everyone {
		t.Fatal(`"groups: []" lets someone see the cluster`)
	}
	if a, _ := agents.Lookup("rotating"); !a.Groups.Allows(nil) {
		t.Fatal("no groups doesn't let everyone see the cluster")
	}
	if a, _ := agents.Lookup("private-eu"); !a.Groups.Allows([]string{"x", "sre"}) || a.Groups.Allows([]string{"dev"}) {
		t.Fatal("groups [platform, sre] don't work")
	}
	if list, err := ParseAgents(SettingAgents, []byte("[]")); err != nil || list == nil || len(list) != 0 {
		t.Fatalf(`"[]" = %v, %v; want an empty list`, list, err)
	}
}

func TestLoadSources(t *testing.T) {
	if a, err := Load(Config{}); a != nil || err != nil {
		t.Fatalf("Load with no settings = %v, %v; want nil, nil", a, err)
	}
	if a, err := Load(Config{Agents: " \n", AgentsFile: ""}); a != nil || err != nil {
		t.Fatalf("Load with a blank setting = %v, %v; want nil, nil", a, err)
	}
	_, err := Load(Config{Agents: "[]", AgentsFile: "/x"})
	if want := "TETHER_FLEET_AGENTS and TETHER_FLEET_AGENTS_FILE are both set; set only one of them."; err == nil || err.Error() != want {
		t.Fatalf("both set: %v, want %s", err, want)
	}
	missing := filepath.Join(t.TempDir(), "agents.yaml")
	_, err = Load(Config{AgentsFile: missing})
	if want := "TETHER_FLEET_AGENTS_FILE can't be read: open " + missing + ": no such file or directory"; err == nil || err.Error() != want || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v, want %s", err, want)
	}
	bad := writeFile(t, t.TempDir(), "agents.yaml", "- name: private-eu\n")
	_, err = Load(Config{AgentsFile: bad})
	if want := `TETHER_FLEET_AGENTS_FILE[0] ("private-eu") needs a token of at least 32 characters, or its tokenSha256.`; err == nil || err.Error() != want {
		t.Fatalf("bad file: %v, want %s", err, want)
	}
}

func hashes(hex ...string) []listfile.Hash {
	var out []listfile.Hash
	for _, s := range hex {
		h, err := listfile.ParseHash(s)
		if err != nil {
			panic(err)
		}
		out = append(out, h)
	}
	return out
}

func wrap(s string) string {
	var b strings.Builder
	for len(s) > 60 {
		b.WriteString(s[:60] + "\n")
		s = s[60:]
	}
	return b.String() + s + "\n"
}

// writeFile replaces dir/name with content atomically (a new file renamed
// into place), so a watcher never reads it half written.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	files.Replace(t, p, content)
	return p
}
