package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/pki"
)

// FuzzParseHubURL: whatever TETHER_HUB_URL holds, an accepted URL is an
// http or https address with a host and no credentials, query or fragment,
// and the agent's WebSocket address made from it is one too.
func FuzzParseHubURL(f *testing.F) {
	for _, s := range []string{
		"https://tether.example.com", "http://10.0.0.1:8080/tether/", " https://h/ ", "tether.example.com",
		"https://user:pass@h", "https://h?x=1", "https://h#f", "ftp://h", "https://", "https://:443",
		"https://[::1]:8443/base", "https://h/%2F..%2F", "https://h/a b", "http://h:99999", "https://h\n", "https://me:hunter2@h/%zz",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := ParseHubURL(raw)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "TETHER_HUB_URL must ") {
				t.Fatalf("error doesn't name the setting: %v", err)
			}
			// A password where a host would be, parseable or not, is never
			// quoted.
			if _, rest, ok := strings.Cut(strings.TrimSpace(raw), "://"); ok {
				if end := strings.IndexAny(rest, "/?#"); end >= 0 {
					rest = rest[:end]
				}
				if userinfo, _, ok := strings.Cut(rest, "@"); ok {
					if _, pw, ok := strings.Cut(userinfo, ":"); ok && len(pw) >= 4 && strings.Contains(err.Error(), ":"+pw+"@") {
						t.Fatalf("the error quotes the password %q: %v", pw, err)
					}
				}
			}
			return
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			t.Fatalf("accepted %q as %#v", raw, u)
		}
		if strings.HasSuffix(u.Path, "/") {
			t.Fatalf("path %q keeps a trailing slash", u.Path)
		}
		a := &Agent{cfg: Config{Options: Options{HubURL: u}}}
		ws := a.agentURL()
		if !strings.HasPrefix(ws, "ws://") && !strings.HasPrefix(ws, "wss://") || !strings.HasSuffix(ws, "/api/agent") {
			t.Fatalf("agent URL %q from %q", ws, raw)
		}
		if again, err := ParseHubURL(u.String()); err != nil || again.String() != u.String() {
			t.Fatalf("%q parsed to %q, which parses to %v, %v", raw, u, again, err)
		}
	})
}

// FuzzOptionsFromEnv: bad settings give one line naming the setting, and
// never show the token. The service account directory is a real one, so
// good settings parse, and what they parse to holds.
func FuzzOptionsFromEnv(f *testing.F) {
	f.Add("https://h", "eu-1", "0123456789abcdef0123456789abcdef", "60", "h", "443", ":8081", "team-a, team-b", "istio-system/public")
	f.Add("h", "", " secret-token\n", "0", "", "x", "0", ",,", "x")
	f.Add("https://h", "UPPER", "", "-1", "10.0.0.1", "65536", "", "B", "a/b/c")
	ca, err := pki.NewCA("fuzz", time.Hour)
	if err != nil {
		f.Fatal(err)
	}
	sa := f.TempDir()
	for name, content := range map[string]string{"token": "service-account-token", "ca.crt": string(ca.CertPEM)} {
		if err := os.WriteFile(filepath.Join(sa, name), []byte(content), 0o600); err != nil {
			f.Fatal(err)
		}
	}
	good := map[string]string{"TETHER_HUB_URL": "https://h", "TETHER_AGENT_TOKEN": "0123456789abcdef", "KUBERNETES_SERVICE_HOST": "h", "TETHER_SERVICEACCOUNT_DIR": sa}
	if _, err := OptionsFromEnv(func(k string) string { return good[k] }); err != nil {
		f.Fatalf("good settings don't parse, so the fuzzing would never pass them: %v", err)
	}
	f.Fuzz(func(t *testing.T, hubURL, name, token, reread, host, port, health, namespaces, tieBreaker string) {
		env := map[string]string{
			"TETHER_HUB_URL": hubURL, "TETHER_AGENT_NAME": name, "TETHER_AGENT_TOKEN": token,
			"TETHER_TOKEN_REREAD_SECONDS": reread, "KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port,
			"TETHER_HEALTH_ADDR": health, "TETHER_SERVICEACCOUNT_DIR": sa,
			"TETHER_ALLOWED_NAMESPACES": namespaces, "TETHER_ISTIO_GATEWAY_TIE_BREAKER": tieBreaker,
		}
		o, err := OptionsFromEnv(func(k string) string { return env[k] })
		if err == nil {
			if o.Token != strings.TrimSpace(token) || o.Token == "" {
				t.Fatalf("token %q became %q", token, o.Token)
			}
			if o.TokenReread < time.Second || o.HubURL == nil || o.APIServer == "" {
				t.Fatalf("parsed to %+v", o)
			}
			for _, ns := range o.AllowedNamespaces {
				if ns == "" || ns != strings.TrimSpace(ns) || !strings.Contains(namespaces, ns) {
					t.Fatalf("namespaces %q parsed to %q", namespaces, o.AllowedNamespaces)
				}
			}
			if o.GatewayTieBreaker != "" && strings.Count(o.GatewayTieBreaker, "/") != 1 {
				t.Fatalf("tie breaker %q parsed to %q", tieBreaker, o.GatewayTieBreaker)
			}
			return
		}
		msg := err.Error()
		if strings.Contains(msg, "\n") {
			t.Fatalf("error on more than one line: %q", msg)
		}
		if tok := strings.TrimSpace(token); len(tok) >= 8 && strings.Contains(msg, tok) && !strings.Contains(hubURL+name+host+port+reread+health+namespaces+tieBreaker, tok) {
			t.Fatalf("error shows the token: %s", msg)
		}
	})
}

// FuzzRetryAfter: a hub's Retry-After never makes the agent wait less than
// a second or more than the cap, and only digits count.
func FuzzRetryAfter(f *testing.F) {
	for _, s := range []string{"0", "1", " 30 ", "-1", "1.5", "9999999999", "99999999999999999999", "Wed, 21 Oct 2026 07:28:00 GMT", "", "+5", "0x10", "٣"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d, ok := retryAfter(v)
		if !ok {
			if d != 0 {
				t.Fatalf("not ok but %s", d)
			}
			return
		}
		if d < time.Second || d > maxRetryAfter {
			t.Fatalf("Retry-After %q: wait %s", v, d)
		}
		if strings.Trim(strings.TrimSpace(v), "0123456789") != "" {
			t.Fatalf("accepted %q", v)
		}
	})
}

func TestRetryAfter(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"0", time.Second, true}, {"1", time.Second, true}, {"5", 5 * time.Second, true}, {" 7 ", 7 * time.Second, true},
		{"9999999999", maxRetryAfter, true}, {"-1", 0, false}, {"+5", 0, false}, {"1.5", 0, false},
		{"99999999999999999999", 0, false}, {"Wed, 21 Oct 2026 07:28:00 GMT", 0, false}, {"", 0, false},
	} {
		if got, ok := retryAfter(tt.in); got != tt.want || ok != tt.ok {
			t.Errorf("retryAfter(%q) = %s, %v; want %s, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}
