package fleet

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"

	"sigs.k8s.io/yaml"
)

// MinTokenLength is the fewest characters a plain token in a list may have: shorter ones can be
// guessed. The tokens NewToken makes have 64.
const MinTokenLength = 32

// Hash is the SHA-256 of a token's text. Lists keep only hashes, so the hub's memory, settings
// and logs never hold a token that would let someone connect.
type Hash [sha256.Size]byte

// String returns the hash as 64 lower-case hex characters, as sha256sum prints it.
func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// HashToken returns the SHA-256 of token's text exactly as written: no trimming, no line break.
func HashToken(token string) Hash { return sha256.Sum256([]byte(token)) }

// TokenSHA256 returns the SHA-256 of token as 64 lower-case hex characters: what
// printf %s "$TOKEN" | sha256sum prints.
func TokenSHA256(token string) string { return HashToken(token).String() }

// ParseHash reads 64 hex characters, upper- or lower-case. The error does not repeat s: callers
// word their own message, and decide whether the value may be shown.
func ParseHash(s string) (Hash, error) {
	var h Hash
	if len(s) != 2*len(h) {
		return h, fmt.Errorf("parse hash: %d characters, want %d hex characters", len(s), 2*len(h))
	}
	if _, err := hex.Decode(h[:], []byte(s)); err != nil {
		return Hash{}, fmt.Errorf("parse hash: not hex characters")
	}
	return h, nil
}

// equalHash compares in constant time, so how long it takes says nothing about how many leading
// bytes of a guess were right.
func equalHash(a, b Hash) bool { return subtle.ConstantTimeCompare(a[:], b[:]) == 1 }

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
