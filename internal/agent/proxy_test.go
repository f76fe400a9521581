package agent

import (
	"net/http"
	"net/url"
	"testing"
)

// TestProxyFromTheEnvironment: the WebSocket to the hub goes through
// HTTPS_PROXY (HTTP_PROXY for an http hub), except to hosts NO_PROXY names,
// as Go's net/http reads them (SPEC section 1). The dial asks with the
// upgrade request's http or https URL.
func TestProxyFromTheEnvironment(t *testing.T) {
	t.Setenv("HTTPS_PROXY", "http://proxy.example.com:3128")
	t.Setenv("HTTP_PROXY", "http://plain-proxy.example.com:3128")
	t.Setenv("NO_PROXY", "inside.example.com,.corp.example.com")
	hub, _ := url.Parse("https://tether.example.com")
	a, err := New(Config{Options: Options{HubURL: hub}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ target, want string }{
		{"https://tether.example.com/api/agent", "http://proxy.example.com:3128"},
		{"http://tether.example.com/api/agent", "http://plain-proxy.example.com:3128"},
		{"https://inside.example.com/api/agent", ""},
		{"https://hub.corp.example.com/api/agent", ""},
	} {
		u, _ := url.Parse(tt.target)
		got, err := a.cfg.Proxy(&http.Request{URL: u})
		if err != nil {
			t.Errorf("%s: %v", tt.target, err)
			continue
		}
		if (got == nil) != (tt.want == "") || got != nil && got.String() != tt.want {
			t.Errorf("%s goes through %v, want %q", tt.target, got, tt.want)
		}
	}
}
