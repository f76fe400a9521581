package auth

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestOptionsFromEnvDefaults(t *testing.T) {
	c, err := OptionsFromEnv(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Configured() {
		t.Error("Configured with no settings")
	}
	c, err = OptionsFromEnv(env(map[string]string{
		"TETHER_OIDC_ISSUER":              "https://accounts.example.com",
		"TETHER_OIDC_CLIENT_ID":           "tether",
		"TETHER_PUBLIC_URL":               "https://tether.example.com/base/",
		"TETHER_KUBECONFIG_TTL":           "90m",
		"TETHER_AUTH_PROXY_USER_HEADER":   "x-remote-user",
		"TETHER_AUTH_PROXY_GROUPS_HEADER": "X-Remote-Group",
		"TETHER_AUTH_PROXY_TRUSTED_CIDRS": "10.0.0.0/8, 192.0.2.7,fd00::/8, ::ffff:172.16.0.0/108,",
		"TETHER_IMPERSONATE_USER_PREFIX":  "tether:",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Configured() || c.HubURL != "https://tether.example.com/base" || c.TTL != 90*time.Minute || c.UserPrefix != "tether:" {
		t.Errorf("config = %+v", c)
	}
	want := []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.7/32"),
		netip.MustParsePrefix("fd00::/8"), netip.MustParsePrefix("172.16.0.0/12"),
	}
	if !slices.Equal(c.ProxyTrusted, want) {
		t.Errorf("trusted = %v, want %v", c.ProxyTrusted, want)
	}
	a := newAuth(t, Config{})
	if a.hub.ttl != 12*time.Hour || a.hub.audience != "tether-hub" {
		t.Errorf("defaults: ttl %s, audience %q", a.hub.ttl, a.hub.audience)
	}
	if got := a.Sources(); !slices.Equal(got, []string{"hub"}) {
		t.Errorf("Sources = %v", got)
	}
}

func TestOptionsFromEnvErrors(t *testing.T) {
	oidc := map[string]string{"TETHER_OIDC_ISSUER": "https://id.example.com", "TETHER_OIDC_CLIENT_ID": "tether"}
	proxy := map[string]string{"TETHER_AUTH_PROXY_USER_HEADER": "X-Remote-User", "TETHER_AUTH_PROXY_TRUSTED_CIDRS": "10.0.0.0/8"}
	with := func(base map[string]string, kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"users and users file", with(nil, "TETHER_USERS", "[]", "TETHER_USERS_FILE", "/etc/tether/users.yaml"),
			`TETHER_USERS and TETHER_USERS_FILE are both set; set only one of them.`},
		{"client id without issuer", with(nil, "TETHER_OIDC_CLIENT_ID", "x"),
			`TETHER_OIDC_CLIENT_ID is set but TETHER_OIDC_ISSUER isn't: set the issuer's URL too, or unset TETHER_OIDC_CLIENT_ID`},
		{"claim without issuer", with(nil, "TETHER_OIDC_GROUPS_CLAIM", "roles"),
			`TETHER_OIDC_GROUPS_CLAIM is set but TETHER_OIDC_ISSUER isn't: set the issuer's URL too, or unset TETHER_OIDC_GROUPS_CLAIM`},
		{"http issuer", with(oidc, "TETHER_OIDC_ISSUER", "http://id.example.com"),
			`TETHER_OIDC_ISSUER must be the issuer's https URL, exactly as it names itself (the "iss" of its tokens), like https://accounts.example.com, not "http://id.example.com"`},
		{"issuer without scheme", with(oidc, "TETHER_OIDC_ISSUER", "id.example.com"),
			`TETHER_OIDC_ISSUER must be the issuer's https URL, exactly as it names itself (the "iss" of its tokens), like https://accounts.example.com, not "id.example.com"`},
		{"issuer without client", with(oidc, "TETHER_OIDC_CLIENT_ID", ""),
			`TETHER_OIDC_CLIENT_ID must be set with TETHER_OIDC_ISSUER: the hub takes only ID tokens meant for this client (their "aud")`},
		{"bad claim", with(oidc, "TETHER_OIDC_USERNAME_CLAIM", "preferred username"),
			`TETHER_OIDC_USERNAME_CLAIM must be the name of a claim, like email or groups, not "preferred username"`},
		{"ttl not a duration", with(nil, "TETHER_KUBECONFIG_TTL", "12"),
			`TETHER_KUBECONFIG_TTL must be a duration like 12h or 30m, at least 1m, not "12"`},
		{"ttl too short", with(nil, "TETHER_KUBECONFIG_TTL", "30s"),
			`TETHER_KUBECONFIG_TTL must be a duration like 12h or 30m, at least 1m, not "30s"`},
		{"header without cidrs", with(proxy, "TETHER_AUTH_PROXY_TRUSTED_CIDRS", ""),
			`TETHER_AUTH_PROXY_TRUSTED_CIDRS must be set with TETHER_AUTH_PROXY_USER_HEADER: the addresses of the proxy, like 10.0.0.0/8, as only it may say who a request is from`},
		{"cidrs without header", with(proxy, "TETHER_AUTH_PROXY_USER_HEADER", ""),
			`TETHER_AUTH_PROXY_TRUSTED_CIDRS is set but TETHER_AUTH_PROXY_USER_HEADER isn't: name the header the proxy puts the user's name in, or unset TETHER_AUTH_PROXY_TRUSTED_CIDRS`},
		{"groups header without user header", with(nil, "TETHER_AUTH_PROXY_GROUPS_HEADER", "X-Remote-Group"),
			`TETHER_AUTH_PROXY_GROUPS_HEADER is set but TETHER_AUTH_PROXY_USER_HEADER isn't: name the header the proxy puts the user's name in, or unset TETHER_AUTH_PROXY_GROUPS_HEADER`},
		{"bad cidr", with(proxy, "TETHER_AUTH_PROXY_TRUSTED_CIDRS", "10.0.0.0/8,10.0.0.0/33"),
			`TETHER_AUTH_PROXY_TRUSTED_CIDRS must be comma-separated CIDRs like 10.0.0.0/8 or fd00::/8; "10.0.0.0/33" is not one`},
		{"host name", with(proxy, "TETHER_AUTH_PROXY_TRUSTED_CIDRS", "proxy.internal"),
			`TETHER_AUTH_PROXY_TRUSTED_CIDRS must be comma-separated CIDRs like 10.0.0.0/8 or fd00::/8; "proxy.internal" is not one`},
		{"everyone v4", with(proxy, "TETHER_AUTH_PROXY_TRUSTED_CIDRS", "0.0.0.0/0"),
			`TETHER_AUTH_PROXY_TRUSTED_CIDRS must not contain "0.0.0.0/0": it would trust every address, so anyone could claim to be anyone; give the proxy's addresses`},
		{"everyone v6", with(proxy, "TETHER_AUTH_PROXY_TRUSTED_CIDRS", "10.0.0.0/8,::/0"),
			`TETHER_AUTH_PROXY_TRUSTED_CIDRS must not contain "::/0": it would trust every address, so anyone could claim to be anyone; give the proxy's addresses`},
		{"bad header name", with(proxy, "TETHER_AUTH_PROXY_USER_HEADER", "X Remote User"),
			`TETHER_AUTH_PROXY_USER_HEADER must be a header name like X-Remote-User, not "X Remote User"`},
		{"authorization", with(proxy, "TETHER_AUTH_PROXY_USER_HEADER", "authorization"),
			`TETHER_AUTH_PROXY_USER_HEADER can't be "authorization": the hub and Kubernetes use that header themselves; choose the header your proxy sets, like X-Remote-User`},
		{"impersonate", with(proxy, "TETHER_AUTH_PROXY_GROUPS_HEADER", "Impersonate-Group"),
			`TETHER_AUTH_PROXY_GROUPS_HEADER can't be "Impersonate-Group": the hub and Kubernetes use that header themselves; choose the header your proxy sets, like X-Remote-User`},
		{"same header twice", with(proxy, "TETHER_AUTH_PROXY_GROUPS_HEADER", "x-remote-user"),
			`TETHER_AUTH_PROXY_USER_HEADER and TETHER_AUTH_PROXY_GROUPS_HEADER must be different headers; both are "X-Remote-User"`},
		{"system prefix", with(nil, "TETHER_IMPERSONATE_USER_PREFIX", "system:tether:"),
			`TETHER_IMPERSONATE_USER_PREFIX must be text without control characters or spaces at either end, not starting with "system:" (Kubernetes keeps those names for itself), like "tether:"; it is "system:tether:"`},
		{"prefix with a space", with(nil, "TETHER_IMPERSONATE_GROUP_PREFIX", "tether: "),
			`TETHER_IMPERSONATE_GROUP_PREFIX must be text without control characters or spaces at either end, not starting with "system:" (Kubernetes keeps those names for itself), like "tether:"; it is "tether: "`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := OptionsFromEnv(env(tc.env))
			if err == nil || err.Error() != tc.want {
				t.Errorf("error:\n got %v\nwant %s", err, tc.want)
			}
		})
	}
}

// TestNewErrors covers what New finds in the files the settings name.
func TestNewErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	missing := filepath.Join(dir, "missing")
	rsaKey := write("rsa.pem", rsaPKCS8PEM(t))
	ecKey := write("ec.pem", ecSEC1PEM(t))
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"users and file", Config{Users: "- name: a\n  token: " + strings.Repeat("x", 32), UsersFile: missing},
			`TETHER_USERS and TETHER_USERS_FILE are both set; set only one of them.`},
		{"users file missing", Config{UsersFile: missing},
			`TETHER_USERS_FILE can't be read: open ` + missing + `: no such file or directory`},
		{"bad users", Config{Users: "- name: alice\n  token: short\n"},
			`TETHER_USERS[0] ("alice") needs a token of at least 32 characters, or its tokenSha256.`},
		{"bad users file", Config{UsersFile: write("users.yaml", "- name: alice\n  tokenSha256: abc\n")},
			`TETHER_USERS_FILE[0] ("alice") has a tokenSha256 that is not 64 hex characters: it has 3, 0 of them not hex digits (not quoted, as it may be the token itself: that goes in token); make it with: printf %s "$TOKEN" | sha256sum`},
		{"key missing", Config{SigningKeyFile: missing},
			`TETHER_TOKEN_SIGNING_KEY_FILE can't be read: open ` + missing + `: no such file or directory`},
		{"key not pem", Config{SigningKeyFile: write("junk.pem", "not a key")},
			`TETHER_TOKEN_SIGNING_KEY_FILE must hold an Ed25519 private key in PEM, as openssl genpkey -algorithm ed25519 writes it; ` + dir + `/junk.pem has no PEM block`},
		{"key rsa", Config{SigningKeyFile: rsaKey},
			`TETHER_TOKEN_SIGNING_KEY_FILE must hold an Ed25519 private key in PEM, as openssl genpkey -algorithm ed25519 writes it; key 1 in ` + rsaKey + ` is an RSA key`},
		{"key sec1", Config{SigningKeyFile: ecKey},
			`TETHER_TOKEN_SIGNING_KEY_FILE must hold an Ed25519 private key in PEM, as openssl genpkey -algorithm ed25519 writes it; ` + ecKey + ` has a "EC PRIVATE KEY" block (key 1)`},
		{"key garbled", Config{SigningKeyFile: write("garbled.pem", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")},
			`TETHER_TOKEN_SIGNING_KEY_FILE must hold an Ed25519 private key in PEM, as openssl genpkey -algorithm ed25519 writes it; key 1 in ` + dir + `/garbled.pem is not a PKCS #8 private key`},
		{"ca missing", Config{OIDC: OIDCConfig{Issuer: "https://id.example.com", ClientID: "c", CAFile: missing}},
			`TETHER_OIDC_CA_FILE can't be read: open ` + missing + `: no such file or directory`},
		{"ca empty", Config{OIDC: OIDCConfig{Issuer: "https://id.example.com", ClientID: "c", CAFile: write("ca.pem", "")}},
			`TETHER_OIDC_CA_FILE must be a PEM file of CA certificates; ` + dir + `/ca.pem has none`},
		{"validated too", Config{ProxyUserHeader: "X-Remote-User"},
			`TETHER_AUTH_PROXY_TRUSTED_CIDRS must be set with TETHER_AUTH_PROXY_USER_HEADER: the addresses of the proxy, like 10.0.0.0/8, as only it may say who a request is from`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := New(tc.cfg)
			if err == nil {
				_ = a.Close()
			}
			if err == nil || err.Error() != tc.want {
				t.Errorf("error:\n got %v\nwant %s", err, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), "\n") {
				t.Errorf("error on more than one line: %q", err)
			}
		})
	}
}

func TestConfigured(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want bool
	}{
		{Config{}, false},
		{Config{SigningKeyFile: "k.pem", TTL: time.Hour}, false},
		{Config{Users: "  \n"}, false},
		{Config{Users: "[]"}, true},
		{Config{UsersFile: "users.yaml"}, true},
		{Config{OIDC: OIDCConfig{Issuer: "https://id.example.com"}}, true},
		{Config{ProxyUserHeader: "X-Remote-User"}, true},
	} {
		if got := tc.cfg.Configured(); got != tc.want {
			t.Errorf("%+v: Configured = %v", tc.cfg, got)
		}
	}
	if !strings.HasPrefix(ErrNothingConfigured.Error(), "no way for people to sign in is configured: set TETHER_USERS") {
		t.Errorf("ErrNothingConfigured = %q", ErrNothingConfigured)
	}
}
