package auth

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// writeKeys writes keys as TETHER_TOKEN_SIGNING_KEY_FILE holds them.
func writeKeys(t *testing.T, keys ...ed25519.PrivateKey) string {
	t.Helper()
	var data []byte
	for _, k := range keys {
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		data = append(data, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})...)
	}
	path := filepath.Join(t.TempDir(), "keys.pem")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSeal: what one replica seals, another with the same signing key
// opens, for the same purpose only; a hub with other keys can't, and a
// key being rotated out still opens what it sealed.
func TestSeal(t *testing.T) {
	_, oldKey, _ := ed25519.GenerateKey(rand.Reader)
	_, newKey, _ := ed25519.GenerateKey(rand.Reader)
	hub := func(path string) *Authenticator {
		a, err := New(Config{SigningKeyFile: path})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close() })
		return a
	}
	one, two := hub(writeKeys(t, oldKey)), hub(writeKeys(t, oldKey))
	sealed, err := one.Seal("cli-code", []byte("alice"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := two.Open("cli-code", sealed); err != nil || string(got) != "alice" {
		t.Errorf("another replica opened %q, %v", got, err)
	}
	if _, err := two.Open("other", sealed); !errors.Is(err, ErrSealed) {
		t.Errorf("opened for another purpose: %v", err)
	}
	if _, err := two.Open("cli-code", sealed[:len(sealed)-2]+"AA"); !errors.Is(err, ErrSealed) {
		t.Errorf("opened changed: %v", err)
	}
	if _, err := hub(writeKeys(t, newKey)).Open("cli-code", sealed); !errors.Is(err, ErrSealed) {
		t.Errorf("a hub with another key opened it: %v", err)
	}
	if got, err := hub(writeKeys(t, newKey, oldKey)).Open("cli-code", sealed); err != nil || string(got) != "alice" {
		t.Errorf("the old key, second in the file, opened %q, %v", got, err)
	}
	for _, s := range []string{"", "!", "AAAA"} {
		if _, err := one.Open("cli-code", s); !errors.Is(err, ErrSealed) {
			t.Errorf("Open(%q): %v", s, err)
		}
	}
}
