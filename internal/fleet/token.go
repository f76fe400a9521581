package fleet

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"fmt"

	"sigs.k8s.io/yaml"

	"github.com/tetherhq/tether/internal/listfile"
)

// equalHash compares in constant time, so how long it takes says nothing about how many leading
// bytes of a guess were right.
func equalHash(a, b listfile.Hash) bool { return subtle.ConstantTimeCompare(a[:], b[:]) == 1 }

// NewToken makes an agent token: 32 random bytes as 64 lower-case hex characters.
func NewToken() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("new token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// AgentsEntry renders the hub's agents-list entry for an agent called name whose token has the
// SHA-256 tokenSHA256, ready to append to the list:
//
//	# AgentsEntry("private-eu", TokenSHA256("test"))
//	- name: private-eu
//	  tokenSha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
//
// Values YAML would read as something other than text (a name like "on" or "123", a hash of
// digits only) come out quoted, so the list reads back exactly as written.
func AgentsEntry(name, tokenSHA256 string) string {
	out, err := yaml.Marshal([]map[string]string{{"name": name, "tokenSha256": tokenSHA256}})
	if err != nil {
		// Marshalling a map of strings can't fail; %q is valid YAML for any printable text.
		return fmt.Sprintf("- name: %q\n  tokenSha256: %q\n", name, tokenSHA256)
	}
	return string(out)
}
