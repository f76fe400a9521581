package login

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientauthv1 "k8s.io/client-go/pkg/apis/clientauthentication/v1"
)

const staticToken = "alice-static-token-of-at-least-32-characters"

// fakeHub answers GET /api/clusters and /api/kubeconfig as a hub does, for
// a static token and the tokens it issues for it.
type fakeHub struct {
	mu        sync.Mutex
	now       func() time.Time
	ttl       time.Duration
	issued    map[string]bool // the issued tokens it still takes
	exchanges int
	checks    int
	noIssue   bool // no /api/kubeconfig: an older hub
	refuse    bool // the static token is no longer on the list
}

func (f *fakeHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	token := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	static := token == staticToken && !f.refuse
	switch r.URL.Path {
	case "/api/clusters":
		f.checks++
		if !static && !f.issued[token] {
			http.Error(w, "Tether doesn't know who you are: sign in first.", http.StatusUnauthorized)
			return
		}
		fmt.Fprint(w, `[{"name":"prod","status":"Ready"},{"name":"dev","status":"Ready"}]`)
	case "/api/kubeconfig":
		if f.noIssue {
			http.NotFound(w, r)
			return
		}
		if !static {
			http.Error(w, "Tether doesn't know who you are.", http.StatusUnauthorized)
			return
		}
		f.exchanges++
		exp := f.now().Add(f.ttl).Unix()
		payload := base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, `{"sub":"alice","exp":%d,"n":%d}`, exp, f.exchanges))
		issued := "eyJhbGciOiJFZERTQSJ9." + payload + ".sig"
		f.issued[issued] = true
		fmt.Fprintf(w, "apiVersion: v1\nkind: Config\nclusters:\n- name: x/prod\n  cluster:\n    server: https://x/clusters/prod\n    certificate-authority-data: %s\nusers:\n- name: x\n  user:\n    token: %s\n",
			base64.StdEncoding.EncodeToString([]byte("HUB CA")), issued)
	default:
		http.NotFound(w, r)
	}
}

func (f *fakeHub) revokeAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.issued)
}

func (f *fakeHub) counts() (exchanges, checks int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.exchanges, f.checks
}

// bed is a fake hub, a clock, a cache and a token file.
type bed struct {
	hub       *fakeHub
	url       string
	now       time.Time
	cache     Cache
	tokenFile string
	kube      string
}

func newBed(t *testing.T) *bed {
	b := &bed{now: time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)}
	b.hub = &fakeHub{now: func() time.Time { return b.now }, ttl: 12 * time.Hour, issued: map[string]bool{}}
	srv := httptest.NewServer(b.hub)
	t.Cleanup(srv.Close)
	b.url = srv.URL
	dir := t.TempDir()
	b.cache = Cache{Dir: filepath.Join(dir, "cache", "tether")}
	b.tokenFile = filepath.Join(dir, "token")
	b.kube = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(b.tokenFile, []byte(staticToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return b
}

func (b *bed) login(t *testing.T) string {
	t.Helper()
	var out bytes.Buffer
	err := Login(context.Background(), LoginOptions{Hub: b.url, TokenFile: b.tokenFile, Kubeconfig: b.kube, Command: "tether",
		Cache: b.cache, Now: func() time.Time { return b.now }, Out: &out})
	if err != nil {
		t.Fatalf("login: %v", err)
	}
	return out.String()
}

// credential runs `tether credential` at the bed's time.
func (b *bed) credential() (clientauthv1.ExecCredential, error) {
	var out bytes.Buffer
	var cred clientauthv1.ExecCredential
	err := Credential(context.Background(), CredentialOptions{Hub: b.url, Cache: b.cache, Now: func() time.Time { return b.now }, Out: &out})
	if err != nil {
		return cred, err
	}
	if err := json.Unmarshal(out.Bytes(), &cred); err != nil {
		return cred, fmt.Errorf("not an ExecCredential: %w: %s", err, out.String())
	}
	if cred.APIVersion != "client.authentication.k8s.io/v1" || cred.Kind != "ExecCredential" || cred.Status == nil {
		return cred, fmt.Errorf("not a v1 ExecCredential: %s", out.String())
	}
	return cred, nil
}

// TestCredentialCached: after login, the plugin hands out the hub-issued
// token with its expiry, and a later call the same one without asking the
// hub for another.
func TestCredentialCached(t *testing.T) {
	b := newBed(t)
	out := b.login(t)
	if !strings.Contains(out, "kubectl --context "+Prefix(b.url)+"/prod get namespaces") {
		t.Errorf("login said %q, want a kubectl command for the first context", out)
	}
	first, err := b.credential()
	if err != nil {
		t.Fatal(err)
	}
	if first.Status.Token == staticToken || !strings.HasPrefix(first.Status.Token, "eyJ") {
		t.Errorf("token %q, want the hub-issued one", first.Status.Token)
	}
	if exp := first.Status.ExpirationTimestamp; exp == nil || !exp.Time.Equal(b.now.Add(12*time.Hour)) {
		t.Errorf("expirationTimestamp %v, want the token's exp", exp)
	}
	b.now = b.now.Add(time.Hour)
	second, err := b.credential()
	if err != nil || second.Status.Token != first.Status.Token {
		t.Errorf("an hour later: %v, %v; want the cached token", second.Status.Token, err)
	}
	if ex, checks := b.hub.counts(); ex != 1 || checks != 1 {
		t.Errorf("the hub was asked for %d tokens and %d checks; want 1 (login's) and 1 (login's list)", ex, checks)
	}
}

// TestCredentialExpired: a token past its expiry (or within the margin of
// it) is replaced by signing in again with the token file.
func TestCredentialExpired(t *testing.T) {
	b := newBed(t)
	b.login(t)
	first, _ := b.credential()
	b.now = b.now.Add(12*time.Hour - 10*time.Second)
	second, err := b.credential()
	if err != nil || second.Status.Token == first.Status.Token {
		t.Fatalf("near its expiry: %v; want a new token", err)
	}
	if ex, _ := b.hub.counts(); ex != 2 {
		t.Errorf("%d exchanges, want 2", ex)
	}
}

// TestCredentialRefused: asked again within moments of handing a token out
// (client-go does so after a 401), the plugin asks the hub, and replaces a
// token it refuses; where the hub still takes it, it keeps it.
func TestCredentialRefused(t *testing.T) {
	b := newBed(t)
	b.login(t)
	first, _ := b.credential()
	b.now = b.now.Add(time.Second)
	again, err := b.credential()
	if err != nil || again.Status.Token != first.Status.Token {
		t.Fatalf("asked again, the token still good: %v; want it kept", err)
	}
	if ex, checks := b.hub.counts(); ex != 1 || checks != 2 {
		t.Errorf("%d exchanges and %d checks; want 1 and 2", ex, checks)
	}
	b.hub.revokeAll()
	b.now = b.now.Add(time.Second)
	replaced, err := b.credential()
	if err != nil || replaced.Status.Token == first.Status.Token {
		t.Fatalf("asked again, the token refused: %v; want a new one", err)
	}
	// Outside the window the cached token is handed out unchecked.
	b.now = b.now.Add(recheckWindow)
	if _, err := b.credential(); err != nil {
		t.Fatal(err)
	}
	if _, checks := b.hub.counts(); checks != 3 {
		t.Errorf("%d checks, want 3: none outside the window", checks)
	}
}

// TestCredentialRefusedForGood: a person taken off the list gets an error,
// and the refused token is never handed out again.
func TestCredentialRefusedForGood(t *testing.T) {
	b := newBed(t)
	b.login(t)
	b.credential()
	b.hub.revokeAll()
	b.hub.mu.Lock()
	b.hub.refuse = true
	b.hub.mu.Unlock()
	b.now = b.now.Add(time.Second)
	for i := range 2 {
		_, err := b.credential()
		if err == nil || !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), b.tokenFile) {
			t.Errorf("call %d: %v; want the hub's refusal of the token file", i, err)
		}
		b.now = b.now.Add(time.Minute)
	}
}

// TestCredentialStaticToken: a hub that issues no token (no
// /api/kubeconfig) gets the static token, with no expiry.
func TestCredentialStaticToken(t *testing.T) {
	b := newBed(t)
	b.hub.noIssue = true
	b.login(t)
	cred, err := b.credential()
	if err != nil || cred.Status.Token != staticToken || cred.Status.ExpirationTimestamp != nil {
		t.Errorf("%+v, %v; want the static token without an expiry", cred.Status, err)
	}
}

// TestCredentialNotSignedIn: before login, or after logout, the plugin
// says how to sign in.
func TestCredentialNotSignedIn(t *testing.T) {
	b := newBed(t)
	if _, err := b.credential(); err == nil || !strings.Contains(err.Error(), "run tether login --hub "+b.url) {
		t.Errorf("before login: %v", err)
	}
	b.login(t)
	var out bytes.Buffer
	if err := Logout(context.Background(), LogoutOptions{Hub: b.url, Cache: b.cache, Now: func() time.Time { return b.now }, Out: &out}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "can't revoke") {
		t.Errorf("logout said %q, want that the hub can't revoke the token", out.String())
	}
	if _, err := b.credential(); err == nil || !strings.Contains(err.Error(), "not signed in") {
		t.Errorf("after logout: %v", err)
	}
}

// TestCacheFiles: the cache is per hub, readable by the user alone.
func TestCacheFiles(t *testing.T) {
	c := Cache{Dir: filepath.Join(t.TempDir(), "tether")}
	a := &Cached{Hub: "https://a.example.com", Token: "a", Method: MethodTokenFile}
	b := &Cached{Hub: "https://b.example.com:8443", Token: "b", Method: MethodTokenFile}
	for _, x := range []*Cached{a, b} {
		if err := c.Save(x); err != nil {
			t.Fatal(err)
		}
	}
	for _, x := range []*Cached{a, b} {
		got, err := c.Load(x.Hub)
		if err != nil || got.Token != x.Token {
			t.Errorf("Load(%s) = %+v, %v; want token %q", x.Hub, got, err, x.Token)
		}
		file := c.path(x.Hub)
		if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, %v; want mode 0600", file, fi.Mode(), err)
		}
		if fi, err := os.Stat(filepath.Dir(file)); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v, %v; want mode 0700", filepath.Dir(file), fi.Mode(), err)
		}
	}
	if filepath.Base(filepath.Dir(c.path(b.Hub))) != "b.example.com_8443" {
		t.Errorf("b's directory %s", c.path(b.Hub))
	}
	// The same host on http is another hub.
	if _, err := c.Load("http://a.example.com"); !errors.Is(err, ErrNotCached) {
		t.Errorf("Load of http://a.example.com: %v, want ErrNotCached", err)
	}
	if ok, err := c.Remove(a.Hub); !ok || err != nil {
		t.Errorf("Remove: %v, %v", ok, err)
	}
	if _, err := c.Load(a.Hub); !errors.Is(err, ErrNotCached) {
		t.Errorf("after Remove: %v", err)
	}
	if got, err := c.Load(b.Hub); err != nil || got.Token != "b" {
		t.Errorf("b after a's Remove: %+v, %v", got, err)
	}
}

func TestCachedValid(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		c    Cached
		want bool
	}{
		{Cached{Token: "t"}, true},
		{Cached{}, false},
		{Cached{Token: "t", Expires: now.Add(time.Minute)}, true},
		{Cached{Token: "t", Expires: now.Add(expiryMargin)}, false},
		{Cached{Token: "t", Expires: now.Add(-time.Second)}, false},
	} {
		if got := tc.c.Valid(now, expiryMargin); got != tc.want {
			t.Errorf("%+v Valid = %v, want %v", tc.c, got, tc.want)
		}
	}
}

func TestTokenExpiry(t *testing.T) {
	enc := base64.RawURLEncoding.EncodeToString
	for _, tc := range []struct {
		token string
		want  time.Time
	}{
		{"h." + enc([]byte(`{"exp":1800000000}`)) + ".s", time.Unix(1800000000, 0).UTC()},
		{"h." + enc([]byte(`{"sub":"x"}`)) + ".s", time.Time{}},
		{"h.!!!.s", time.Time{}},
		{"a-static-token", time.Time{}},
		{"h." + enc([]byte(`{"exp":-5}`)) + ".s", time.Time{}},
	} {
		if got := tokenExpiry(tc.token); !got.Equal(tc.want) {
			t.Errorf("tokenExpiry(%q) = %v, want %v", tc.token, got, tc.want)
		}
	}
}

// FuzzTokenExpiry: the cached token's expiry is read from what the hub
// sent; nothing it sends makes the reader panic.
func FuzzTokenExpiry(f *testing.F) {
	f.Add("h." + base64.RawURLEncoding.EncodeToString([]byte(`{"exp":1800000000}`)) + ".s")
	f.Add("a.b.c")
	f.Fuzz(func(t *testing.T, token string) { tokenExpiry(token) })
}

// TestLoginPrefixAndCA: --context-prefix names the entries; without
// --ca-file, the clusters trust the CA the hub's own kubeconfig carries.
func TestLoginPrefixAndCA(t *testing.T) {
	b := newBed(t)
	var out bytes.Buffer
	err := Login(context.Background(), LoginOptions{Hub: b.url + "/", TokenFile: b.tokenFile, ContextPrefix: "work", Kubeconfig: b.kube,
		Command: "tether", Cache: b.cache, Now: func() time.Time { return b.now }, Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	cfg := load(t, b.kube)
	c := cfg.Clusters["work/prod"]
	if c == nil || c.Server != b.url+"/clusters/prod" || string(c.CertificateAuthorityData) != "HUB CA" {
		t.Fatalf("cluster work/prod: %+v", c)
	}
	if u := cfg.AuthInfos["work"]; u == nil || u.Exec == nil || u.Exec.Args[2] != b.url {
		t.Errorf("user work: %+v, want tether credential --hub %s", u, b.url)
	}
	if _, err := b.cache.Load(b.url); err != nil {
		t.Errorf("the cache for %s: %v", b.url, err)
	}
}
