package auth

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
)

// ErrSealed is Open's answer for text it can't open: not sealed by this hub
// or its replicas (which share TETHER_TOKEN_SIGNING_KEY_FILE), sealed for
// another purpose, or changed.
var ErrSealed = errors.New("not sealed by this hub")

// sealKey derives the AES-256 key Seal uses from a signing key, by HKDF
// (RFC 5869): replicas that share the signing keys open each other's
// sealed text, and knowing a sealed text's key says nothing of the
// signing key.
func sealKey(priv ed25519.PrivateKey) ([]byte, error) {
	key, err := hkdf.Key(sha256.New, priv.Seed(), nil, "tether seal v1", 32)
	if err != nil {
		return nil, fmt.Errorf("seal key: %w", err)
	}
	return key, nil
}

// Seal encrypts and authenticates plain (AES-256-GCM) for purpose, which
// Open must be given too, so a text sealed for one use can't pass for
// another's. The result is URL-safe base64.
func (a *Authenticator) Seal(purpose string, plain []byte) (string, error) {
	gcm, err := sealAEAD(a.hub.seals[0])
	if err != nil {
		return "", err
	}
	nonce := make([]byte, gcm.NonceSize(), gcm.NonceSize()+len(plain)+gcm.Overhead())
	rand.Read(nonce)
	return base64.RawURLEncoding.EncodeToString(gcm.Seal(nonce, nonce, plain, []byte(purpose))), nil
}

// Open returns what Seal sealed for purpose, with any of the hub's signing
// keys (a key being rotated out still opens what it sealed).
func (a *Authenticator) Open(purpose, sealed string) ([]byte, error) {
	raw, err := base64.RawURLEncoding.DecodeString(sealed)
	if err != nil {
		return nil, ErrSealed
	}
	for _, key := range a.hub.seals {
		gcm, err := sealAEAD(key)
		if err != nil {
			return nil, err
		}
		if len(raw) < gcm.NonceSize()+gcm.Overhead() {
			return nil, ErrSealed
		}
		if plain, err := gcm.Open(nil, raw[:gcm.NonceSize()], raw[gcm.NonceSize():], []byte(purpose)); err == nil {
			return plain, nil
		}
	}
	return nil, ErrSealed
}

func sealAEAD(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	return cipher.NewGCM(block)
}
