package login

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Sign-in methods a Cached entry can name, for `tether credential` to sign
// in again when its token expires or the hub refuses it.
const (
	// MethodTokenFile reads a static token from a file and exchanges it at
	// the hub for a hub-issued one (GET /api/kubeconfig).
	MethodTokenFile = "token-file"
	// MethodBrowser signs in through the hub's page in a browser, which
	// hands the command a one-time code on a loopback listener.
	MethodBrowser = "browser"
	// MethodDevice signs in with a code the person approves on the hub's
	// page from any browser (RFC 8628).
	MethodDevice = "device"
)

// Cached is what `tether credential` keeps for one hub, in
// <user cache dir>/tether/<hub>/token.json, mode 0600.
type Cached struct {
	Hub string `json:"hub"`
	// Token is what kubectl sends: a hub-issued token, or the static token
	// itself where the hub issues none.
	Token string `json:"token"`
	// Expires is the token's expiry; zero for a token that has none.
	Expires time.Time `json:"expires,omitzero"`
	// Served is when `tether credential` last handed Token to kubectl:
	// asked again within moments, kubectl has most likely been refused
	// with it (decision 036).
	Served time.Time `json:"served,omitzero"`
	// Method and TokenFile say how to sign in again without the person.
	Method    string `json:"method"`
	TokenFile string `json:"tokenFile,omitempty"`
	// CA is the PEM of the CA the hub's certificate chains to, when it
	// isn't one the system trusts (--ca-file at login).
	CA []byte `json:"ca,omitempty"`
}

// Valid says whether c's token can still be handed out at now: it expires
// no sooner than margin from now.
func (c *Cached) Valid(now time.Time, margin time.Duration) bool {
	return c.Token != "" && (c.Expires.IsZero() || now.Add(margin).Before(c.Expires))
}

// Cache is the directory the tokens of every hub are cached in.
type Cache struct {
	Dir string
}

// UserCache is the cache under the user's cache directory
// (os.UserCacheDir: $XDG_CACHE_HOME or ~/.cache on Linux).
func UserCache() (Cache, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return Cache{}, fmt.Errorf("cache: %w", err)
	}
	return Cache{Dir: filepath.Join(dir, "tether")}, nil
}

// path is hub's token file. The hub's prefix names its directory, with
// the characters a file name can't hold everywhere ('/', ':') replaced.
func (c Cache) path(hub string) string {
	dir := strings.NewReplacer("/", "_", ":", "_", "\\", "_").Replace(Prefix(hub))
	return filepath.Join(c.Dir, dir, "token.json")
}

// ErrNotCached is Load's answer for a hub nothing is cached for.
var ErrNotCached = errors.New("not signed in")

// Load reads what is cached for hub.
func (c Cache) Load(hub string) (*Cached, error) {
	data, err := os.ReadFile(c.path(hub))
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrNotCached
	}
	if err != nil {
		return nil, fmt.Errorf("read cached token: %w", err)
	}
	var cached Cached
	if err := json.Unmarshal(data, &cached); err != nil {
		return nil, fmt.Errorf("read cached token %s: %w", c.path(hub), err)
	}
	if cached.Hub != hub {
		// Two URLs of one prefix (http and https): not the same hub.
		return nil, ErrNotCached
	}
	return &cached, nil
}

// Save writes cached, readable by the user alone: the directory 0700, the
// file 0600, replaced whole (written aside, then renamed) so that two
// kubectl commands at once never read half a file.
func (c Cache) Save(cached *Cached) error {
	path := c.path(cached.Hub)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("save token: %w", err)
	}
	// MkdirAll leaves an existing directory's mode as it is.
	if err := os.Chmod(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("save token: %w", err)
	}
	data, err := json.MarshalIndent(cached, "", "  ")
	if err != nil {
		return fmt.Errorf("save token: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".token-*.json")
	if err != nil {
		return fmt.Errorf("save token: %w", err)
	}
	defer os.Remove(f.Name()) // after the rename, there is nothing to remove
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("save token: %w", err)
	}
	if _, err := f.Write(append(data, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("save token: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("save token: %w", err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("save token: %w", err)
	}
	return nil
}

// Remove forgets what is cached for hub, and says whether there was any.
func (c Cache) Remove(hub string) (bool, error) {
	err := os.Remove(c.path(hub))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("remove cached token: %w", err)
	}
	return true, nil
}

// tokenExpiry reads the expiry (exp) of a hub-issued token, a JWT, without
// checking its signature: the hub checks that; this only says when to stop
// handing it out. A token that isn't a JWT with an exp has no expiry.
func tokenExpiry(token string) time.Time {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}
	}
	var claims struct {
		Exp *float64 `json:"exp"`
	}
	if json.Unmarshal(payload, &claims) != nil || claims.Exp == nil || *claims.Exp <= 0 {
		return time.Time{}
	}
	sec := int64(*claims.Exp)
	return time.Unix(sec, 0).UTC()
}
