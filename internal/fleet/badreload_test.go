package fleet

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestBadReloadsKeepTheLastGoodList: whatever breaks the agents list file on
// a reload, the list in force stays, and the log says why.
func TestBadReloadsKeepTheLastGoodList(t *testing.T) {
	for _, tt := range []struct{ name, content, why string }{
		{"half written", "- {name: a, tokenSha256: " + hash1[:20], "TETHER_FLEET_AGENTS_FILE"},
		{"not YAML", "- {name: [a\n  : :", "TETHER_FLEET_AGENTS_FILE"},
		{"a duplicate name", entry("a", hash1) + entry("a", hash2), "names must be unique"},
		{"an unknown field", "- {name: a, tokenSha256: " + hash1 + ", tokn: x}\n", `unknown field \"tokn\"`},
		{"a malformed hash", "- {name: a, tokenSha256: 1234}\n", `(\"a\")`},
		{"binary", "\x00\xff\xfe garbage \x01", "TETHER_FLEET_AGENTS_FILE"},
		{"a map, not a list", "name: a\ntokenSha256: " + hash1 + "\n", "TETHER_FLEET_AGENTS_FILE"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, t.TempDir(), "agents.yaml", entry("good", hash1))
			agents, _, logs := watched(t, path)
			writeFile(t, filepath.Dir(path), "agents.yaml", tt.content)
			waitFor(t, func() bool {
				for _, line := range strings.Split(logs.String(), "\n") {
					if strings.Contains(line, "keeping the last good one") && strings.Contains(line, tt.why) {
						return true
					}
				}
				return false
			}, logs)
			if _, ok := agents.Authenticate("good", token1); !ok {
				t.Fatal("the last good list is no longer in force")
			}
		})
	}
}
