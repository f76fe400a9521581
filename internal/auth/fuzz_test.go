package auth

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/listfile"
	"github.com/tetherhq/tether/internal/testutil/oidctest"
	"sigs.k8s.io/yaml"
)

func FuzzParseUsers(f *testing.F) {
	for _, seed := range []string{
		"",
		"[]",
		"- name: alice\n  tokenSha256: " + sha(tokAlice) + "\n  groups: [dev]\n",
		"- name: bob\n  tokenSha256: [" + sha(tokBob) + ", " + strings.ToUpper(sha(tokBob2)) + "]\n",
		"- name: carol\n  token: " + tokCarol + "\n  groups: []\n",
		"- name: a\n  token: " + tokAlice + "\n- name: b\n  token: " + tokAlice + "\n",
		"- name: system:admin\n  token: " + tokAlice + "\n",
		"- name: \"a\\tb\"\n  token: " + tokAlice + "\n  groups: [\" x\"]\n",
		"- {name: 1, token: 2}",
		"- name: a\n  groups:\n",
		"- name: argocd\n  token: " + tokAlice + "\n  limits: {requests: 500, watches: 1000, sessions: 50}\n",
		"- name: a\n  token: " + tokAlice + "\n  limits: {watches: 0, x: 1}\n",
		base64.StdEncoding.EncodeToString([]byte("- name: b64\n  token: " + tokBob + "\n")),
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		list, err := ParseUsers(SettingUsers, data)
		if err != nil {
			if list != nil {
				t.Fatalf("a list and an error: %v", err)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error on more than one line: %q", err)
			}
			for _, tok := range listTokens(data) {
				if strings.Contains(err.Error(), tok) {
					t.Fatalf("error shows the token %q: %s", tok, err)
				}
			}
			return
		}
		names, owners := map[string]bool{}, map[listfile.Hash]string{}
		for _, u := range list {
			if names[u.Name] {
				t.Fatalf("name %q twice", u.Name)
			}
			names[u.Name] = true
			if err := CheckIdentity(u.Name, u.Groups); err != nil {
				t.Fatalf("accepted a user the hub can't impersonate: %v", err)
			}
			for _, n := range []int{u.Limits.Requests, u.Limits.Watches, u.Limits.Sessions} {
				if n < 0 || n > 1_000_000 {
					t.Fatalf("%q has a limit of %d", u.Name, n)
				}
			}
			if n := len(u.TokenHashes); n < 1 || n > 2 {
				t.Fatalf("%q has %d token hashes", u.Name, n)
			}
			for _, h := range u.TokenHashes {
				if o, dup := owners[h]; dup && o != u.Name {
					t.Fatalf("%q and %q share a token", o, u.Name)
				}
				owners[h] = u.Name
			}
		}
	})
}

// listTokens finds the token values in a YAML list, to check that errors never show them.
func listTokens(data []byte) []string {
	var entries []map[string]any
	if yaml.Unmarshal(data, &entries) != nil {
		return nil
	}
	var names, out []string
	for _, e := range entries {
		if name, ok := e["name"].(string); ok {
			names = append(names, name)
		}
		// Field names are shown too: an unknown one is quoted in its error.
		for k := range e {
			names = append(names, k)
		}
	}
	for _, e := range entries {
		tok, ok := e["token"].(string)
		tok = strings.TrimSpace(tok)
		// A token that is part of a name or a field's name shows up with it, which errors must show.
		if ok && len(tok) >= 8 && !slices.ContainsFunc(names, func(n string) bool { return strings.Contains(n, tok) }) {
			out = append(out, tok)
		}
	}
	return out
}

// FuzzAuthenticate feeds arbitrary Authorization values, and auth proxy headers, to an
// Authenticator with every way in configured.
func FuzzAuthenticate(f *testing.F) {
	iss := oidctest.Start(f, oidctest.Options{})
	a, err := New(Config{
		Users:             "- name: alice\n  token: " + tokAlice + "\n  groups: [dev]\n",
		OIDC:              OIDCConfig{Issuer: iss.URL, ClientID: iss.ClientID, CAFile: iss.CAFile(f)},
		ProxyUserHeader:   "X-Remote-User",
		ProxyGroupsHeader: "X-Remote-Group",
		ProxyTrusted:      []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = a.Close() })
	hubTok, _, err := a.IssueToken(Person{Name: "bob", Groups: []string{"ops"}, Source: SourceToken})
	if err != nil {
		f.Fatal(err)
	}
	idTok := iss.IDToken(f, map[string]any{"email": "carol@example.com", "email_verified": true, "groups": "dev"})
	for _, seed := range []struct {
		authz, user, groups string
		trusted             bool
	}{
		{"Bearer " + tokAlice, "", "", false},
		{"Bearer " + hubTok, "", "", false},
		{"Bearer " + idTok, "", "", false},
		{"bearer " + idTok[:len(idTok)-4], "", "", false},
		{"Bearer", "", "", false},
		{"Bearer a.b.c", "", "", false},
		{"Bearer eyJ9.eyJpc3MiOiJ0ZXRoZXItaHViIn0.eA", "", "", false},
		{"Basic YWxpY2U6cGFzcw==", "alice", "dev,ops", true},
		{"", "alice", "dev, ops", true},
		{"", "alice", "", false},
		{tokAlice, "", "", false},
		{"Bearer " + strings.Repeat("x", maxTokenBytes+1), "", "", false},
	} {
		f.Add(seed.authz, seed.user, seed.groups, seed.trusted)
	}
	f.Fuzz(func(t *testing.T, authz, user, groups string, trusted bool) {
		peer := "203.0.113.5:40000"
		if trusted {
			peer = "10.0.0.5:40000"
		}
		r := request(peer)
		if authz != "" {
			r.Header["Authorization"] = []string{authz}
		}
		if user != "" {
			r.Header["X-Remote-User"] = []string{user}
		}
		if groups != "" {
			r.Header["X-Remote-Group"] = []string{groups}
		}
		p, ok, err := a.Authenticate(r)
		if ok && err != nil {
			t.Fatalf("ok and an error: %v", err)
		}
		if ok {
			if p.Name == "" {
				t.Fatalf("ok with no name: %+v", p)
			}
			if p.Source != SourceOIDC && p.Bearer != "" {
				t.Fatalf("kept a %s bearer token", p.Source)
			}
			if p.Source == SourceProxy && !trusted {
				t.Fatal("believed an untrusted peer's headers")
			}
			return
		}
		if err == nil {
			return
		}
		msg := err.Error()
		if strings.Contains(msg, "\n") {
			t.Fatalf("error on more than one line: %q", msg)
		}
		cred := strings.TrimSpace(authz)
		if i := strings.IndexAny(cred, " \t"); i >= 0 {
			cred = strings.TrimSpace(cred[i+1:])
		}
		if len(cred) >= 16 && !strings.ContainsAny(cred, " _") && !strings.Contains(iss.URL, cred) && strings.Contains(msg, cred) {
			t.Fatalf("error shows the credential %q: %s", cred, msg)
		}
	})
}

// FuzzOptionsFromEnv: the authentication settings either parse to what the
// hub can trust, or give one line naming the setting. Above all, the trusted
// proxy addresses: each is a masked prefix of one address family (an
// IPv4-mapped one is unmapped, as peers are compared), and never everyone.
func FuzzOptionsFromEnv(f *testing.F) {
	f.Add("10.0.0.0/8, fd00::/8", "X-Remote-User", "X-Remote-Group", "12h", "https://accounts.example.com", "tether", "email", "oidc:")
	f.Add("::ffff:10.0.0.0/104,127.0.0.1", "X-Remote-User", "", "30m", "", "", "", "")
	f.Add("0.0.0.0/0", "X-Remote-User", "", "10s", "http://x", "", "a b", "system:")
	f.Add("fe80::1%eth0,::ffff:0.0.0.0/95", "Authorization", "authorization", "", "https://x?q", "c", "", "")
	good := map[string]string{SettingProxyTrustedCIDRs: "::ffff:10.0.0.0/104,127.0.0.1", SettingProxyUserHeader: "X-Remote-User"}
	if c, err := OptionsFromEnv(func(k string) string { return good[k] }); err != nil || len(c.ProxyTrusted) != 2 {
		f.Fatalf("good settings: %v, %v", c.ProxyTrusted, err)
	}
	f.Fuzz(func(t *testing.T, cidrs, userHeader, groupsHeader, ttl, issuer, clientID, claim, prefix string) {
		env := map[string]string{
			SettingProxyTrustedCIDRs: cidrs, SettingProxyUserHeader: userHeader, SettingProxyGroupsHeader: groupsHeader,
			SettingKubeconfigTTL: ttl, SettingOIDCIssuer: issuer, SettingOIDCClientID: clientID,
			SettingOIDCUsernameClaim: claim, SettingUserPrefix: prefix,
		}
		c, err := OptionsFromEnv(func(k string) string { return env[k] })
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error on more than one line: %q", err)
			}
			return
		}
		for _, p := range c.ProxyTrusted {
			if !p.IsValid() || p != p.Masked() || p.Addr().Is4In6() || p.Addr().Zone() != "" || p.Bits() == 0 {
				t.Fatalf("%q: trusted prefix %v", cidrs, p)
			}
		}
		if len(c.ProxyTrusted) > 0 && c.ProxyUserHeader == "" {
			t.Fatalf("%q: trusted proxies with no user header", cidrs)
		}
		if c.TTL != 0 && c.TTL < time.Minute {
			t.Fatalf("%q: a TTL of %s", ttl, c.TTL)
		}
	})
}

// FuzzOIDCClaims feeds the claims of a signed ID token (the issuer's to
// write, so untrusted in shape) to what reads the person from them: a name
// is text and never empty, an email counts only with email_verified true,
// and groups are text or a list of texts, anything else refused.
func FuzzOIDCClaims(f *testing.F) {
	f.Add([]byte(`{"email":"ann@example.com","email_verified":true,"groups":["dev","ops"]}`), false)
	f.Add([]byte(`{"email":"ann@example.com","email_verified":"true","groups":"dev"}`), false)
	f.Add([]byte(`{"sub":"1234","groups":null}`), true)
	f.Add([]byte(`{"sub":"","groups":[1,2]}`), true)
	f.Add([]byte(`{"email":["a"],"groups":{"a":"b"}}`), false)
	f.Fuzz(func(t *testing.T, data []byte, bySub bool) {
		var claims map[string]json.RawMessage
		if json.Unmarshal(data, &claims) != nil {
			return
		}
		o := &oidcSource{cfg: OIDCConfig{UsernameClaim: "email", GroupsClaim: "groups"}}
		if bySub {
			o.cfg.UsernameClaim = "sub"
		}
		if name, err := o.username(claims); err == nil {
			var want string
			if name == "" || json.Unmarshal(claims[o.cfg.UsernameClaim], &want) != nil || want != name {
				t.Fatalf("name %q from %s", name, data)
			}
			var verified bool
			if !bySub && (json.Unmarshal(claims["email_verified"], &verified) != nil || !verified) {
				t.Fatalf("an unverified email %q taken from %s", name, data)
			}
		} else if !errors.Is(err, ErrInvalidToken) {
			t.Fatalf("error %v is no ErrInvalidToken", err)
		}
		groups, err := o.groups(claims)
		if err != nil {
			if !errors.Is(err, ErrInvalidToken) {
				t.Fatalf("error %v is no ErrInvalidToken", err)
			}
			return
		}
		raw, ok := claims["groups"]
		var one string
		var list []string
		switch {
		case !ok || string(raw) == "null":
			if groups != nil {
				t.Fatalf("groups %q from no claim", groups)
			}
		case json.Unmarshal(raw, &one) == nil:
			if len(groups) != 1 || groups[0] != one {
				t.Fatalf("groups %q from %s", groups, raw)
			}
		case json.Unmarshal(raw, &list) == nil:
			if !slices.Equal(groups, list) {
				t.Fatalf("groups %q from %s", groups, raw)
			}
		default:
			t.Fatalf("groups %q from %s, which is neither text nor a list of texts", groups, raw)
		}
	})
}
