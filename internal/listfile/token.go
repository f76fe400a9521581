package listfile

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// MinTokenLength is the fewest characters a plain token in a list may have: shorter ones can be
// guessed. The tokens fleet.NewToken makes have 64.
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
