package agent

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/pki"
)

// TestProxyFromTheEnvironment: the WebSocket to the hub goes through
// HTTPS_PROXY (HTTP_PROXY for an http hub), except to hosts NO_PROXY names,
// as Go's net/http reads them (SPEC section 1). The dial asks with the
// upgrade request's http or https URL.
func TestProxyFromTheEnvironment(t *testing.T) {
	env := map[string]string{
		"HTTPS_PROXY": "http://proxy.example.com:3128",
		"HTTP_PROXY":  "http://plain-proxy.example.com:3128",
		"NO_PROXY":    "inside.example.com,.corp.example.com",
	}
	proxy := ProxyFromEnv(func(k string) string { return env[k] })
	for _, tt := range []struct{ target, want string }{
		{"https://tether.example.com/api/agent", "http://proxy.example.com:3128"},
		{"http://tether.example.com/api/agent", "http://plain-proxy.example.com:3128"},
		{"https://inside.example.com/api/agent", ""},
		{"https://hub.corp.example.com/api/agent", ""},
	} {
		checkProxy(t, proxy, tt.target, tt.want)
	}

	// The lower-case names win, and under CGI HTTP_PROXY may be a
	// request's Proxy header, so it is refused (golang.org/s/cgihttpproxy).
	env["https_proxy"] = "http://lower.example.com:3128"
	env["REQUEST_METHOD"] = "GET"
	proxy = ProxyFromEnv(func(k string) string { return env[k] })
	checkProxy(t, proxy, "https://tether.example.com/api/agent", "http://lower.example.com:3128")
	u, _ := url.Parse("http://tether.example.com/api/agent")
	if got, err := proxy(&http.Request{URL: u}); err == nil {
		t.Errorf("under CGI, http goes through %v, want HTTP_PROXY refused", got)
	}
}

// TestProxyIsASetting: OptionsFromEnv reads the proxy with the other
// settings, and New reads nothing from the process: an agent built without
// a Proxy dials the hub directly, whatever HTTPS_PROXY says.
func TestProxyIsASetting(t *testing.T) {
	ca, err := pki.NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"TETHER_HUB_URL":            "https://tether.example.com",
		"TETHER_AGENT_TOKEN":        "secret-agent-token",
		"TETHER_SERVICEACCOUNT_DIR": saDir(t, map[string]string{"token": "sa-token\n", "ca.crt": string(ca.CertPEM)}),
		"KUBERNETES_SERVICE_HOST":   "10.0.0.1",
		"HTTPS_PROXY":               "http://proxy.example.com:3128",
	}
	o, err := OptionsFromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if o.Proxy == nil {
		t.Fatal("OptionsFromEnv left Proxy nil with HTTPS_PROXY set")
	}
	checkProxy(t, o.Proxy, "https://tether.example.com/api/agent", "http://proxy.example.com:3128")

	t.Setenv("HTTPS_PROXY", "http://proxy.example.com:3128")
	hub, _ := url.Parse("https://tether.example.com")
	a, err := New(Config{Options: Options{HubURL: hub}})
	if err != nil {
		t.Fatal(err)
	}
	if a.cfg.Proxy != nil {
		t.Error("New set a Proxy from the process's environment")
	}
}

func checkProxy(t *testing.T, proxy func(*http.Request) (*url.URL, error), target, want string) {
	t.Helper()
	u, _ := url.Parse(target)
	got, err := proxy(&http.Request{URL: u})
	if err != nil {
		t.Errorf("%s: %v", target, err)
		return
	}
	if (got == nil) != (want == "") || got != nil && got.String() != want {
		t.Errorf("%s goes through %v, want %q", target, got, want)
	}
}
