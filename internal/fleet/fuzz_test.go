package fleet

import (
	"encoding/base64"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/tetherhq/tether/internal/listfile"
	"github.com/tetherhq/tether/internal/protocol"
)

func FuzzParseAgents(f *testing.F) {
	for _, seed := range []string{
		"",
		"[]",
		entry("a", hash1),
		entry("a", hash1) + entry("a", hash2),
		"- name: private-eu\n  token: " + token1 + "\n  labels: {a: b}\n  groups: []\n  forwardToken: true\n",
		"- name: x\n  tokenSha256: [" + hash1 + ", " + strings.ToUpper(hash2) + "]\n  caSha256: " + hash1 + "\n",
		"- name: x\n  token: short-secret-token\n",
		"- name: x\n  groups:\n",
		"- {name: 1, tokenSha256: 2}",
		"name: x",
		"- [a]\n- b",
		"&a [*a]",
		base64.StdEncoding.EncodeToString([]byte(entry("b64", hash1))),
		"bm9uZQ==bm9u",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		list, err := ParseAgents(SettingAgents, data)
		if err != nil {
			if list != nil {
				t.Fatalf("a list and an error: %v", err)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error on more than one line: %q", err)
			}
			for _, tok := range plainTokens(data) {
				if strings.Contains(err.Error(), tok) {
					t.Fatalf("error shows the token %q: %s", tok, err)
				}
			}
			return
		}
		seen := map[string]bool{}
		for _, a := range list {
			if protocol.CheckName(a.Name) != nil || seen[a.Name] {
				t.Fatalf("accepted a bad or repeated name %q", a.Name)
			}
			seen[a.Name] = true
			if n := len(a.TokenHashes); n < 1 || n > 2 {
				t.Fatalf("%q has %d token hashes", a.Name, n)
			}
			if a.CASHA256 != "" {
				if h, err := listfile.ParseHash(a.CASHA256); err != nil || h.String() != a.CASHA256 {
					t.Fatalf("%q has caSha256 %q", a.Name, a.CASHA256)
				}
			}
			if a.Groups.Everyone && a.Groups.Names != nil || !a.Groups.Everyone && a.Groups.Names == nil {
				t.Fatalf("%q has groups %+v: absent and [] must stay apart", a.Name, a.Groups)
			}
		}
		// Accepted lists parse the same again: nothing depends on map order.
		again, err := ParseAgents(SettingAgents, data)
		if err != nil || len(again) != len(list) {
			t.Fatalf("second parse differs: %v", err)
		}
	})
}

// plainTokens finds the token values in a YAML list, to check that errors never show them.
func plainTokens(data []byte) []string {
	var entries []map[string]any
	if yaml.Unmarshal(data, &entries) != nil {
		return nil
	}
	var names []string
	for _, e := range entries {
		if n, ok := e["name"].(string); ok {
			names = append(names, n)
		}
	}
	var out []string
	for _, e := range entries {
		tok, ok := e["token"].(string)
		tok = strings.TrimSpace(tok)
		// A field's name is shown when it is unknown, and an entry's name
		// in every error about it (SPEC section 2): a token that is part of
		// either shows up with it.
		inKey := slices.ContainsFunc(names, func(n string) bool { return strings.Contains(n, tok) })
		for k := range e {
			inKey = inKey || strings.Contains(k, tok)
		}
		if ok && len(tok) >= 8 && !inKey {
			out = append(out, tok)
		}
	}
	return out
}

// FuzzParseClusters: a clusters list is refused with a list error, or
// every entry it gives has a DNS-label name, an https server's host:port
// and both files.
func FuzzParseClusters(f *testing.F) {
	for _, seed := range []string{
		"",
		"- name: staging\n  server: https://10.0.0.5:6443\n  caFile: /ca.crt\n  tokenFile: /token\n",
		"- name: p\n  server: https://[fd00::1]/\n  caFile: c\n  tokenFile: t\n  labels: {a: b}\n  groups: [g]\n  forwardToken: true\n",
		"- name: a\n  server: https://h:0\n  caFile: c\n  tokenFile: t\n",
		"- name: a\n  server: \"https://h:\"\n  caFile: c\n  tokenFile: t\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		list, err := ParseClusters(data)
		if err != nil {
			var le *listfile.ListError
			if !errors.As(err, &le) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("not a one-line list error: %q", err)
			}
			return
		}
		for _, c := range list {
			host, port, err := net.SplitHostPort(c.Server)
			if err != nil || host != c.ServerName || host == "" || port == "" || port == "0" {
				t.Fatalf("accepted the server %q (%q)", c.Server, c.ServerName)
			}
			if protocol.CheckName(c.Name) != nil || strings.TrimSpace(c.CAFile) == "" || strings.TrimSpace(c.TokenFile) == "" {
				t.Fatalf("accepted %+v", c)
			}
		}
	})
}
