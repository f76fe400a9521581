package fleet

import (
	"regexp"
	"strings"
	"testing"

	"github.com/tetherhq/tether/internal/listfile"
)

func TestNewToken(t *testing.T) {
	a, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewToken()
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(a) || a == b {
		t.Fatalf("NewToken gave %q then %q; want 64 lower-case hex, different each time", a, b)
	}
}

func TestAgentsEntry(t *testing.T) {
	h := listfile.TokenSHA256("x")
	for _, tc := range []struct{ name, hash, want string }{
		{"private-eu", h, "- name: private-eu\n  tokenSha256: " + h + "\n"},
		// YAML would read these as true and a number: they must come out quoted.
		{"on", h, "- name: \"on\"\n  tokenSha256: " + h + "\n"},
		{"123", strings.Repeat("1", 64), "- name: \"123\"\n  tokenSha256: \"" + strings.Repeat("1", 64) + "\"\n"},
	} {
		got := AgentsEntry(tc.name, tc.hash)
		if got != tc.want {
			t.Errorf("AgentsEntry(%q) = %q, want %q", tc.name, got, tc.want)
			continue
		}
		list, err := ParseAgents(SettingAgents, []byte(got))
		if err != nil || len(list) != 1 || list[0].Name != tc.name || list[0].TokenHashes[0].String() != tc.hash {
			t.Errorf("AgentsEntry(%q) doesn't read back: %v, %v", tc.name, list, err)
		}
	}
}
