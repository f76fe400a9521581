package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/tetherhq/tether/internal/testutil/fakecluster"
)

// TestProxyKeepsThePathAsWritten: the API server gets the path as the
// client escaped it. An escaped slash in a service proxy's path stays one
// (a%2Fb is one segment to the service, a/b two), whatever the method
// (GET or POST), and however the client escaped the hub's own part of the path, the
// cluster's name or the base path (issue 33).
func TestProxyKeepsThePathAsWritten(t *testing.T) {
	const path = "/api/v1/namespaces/a/services/https:web:443/proxy/a%2Fb/c%20d?q=x%2Fy"
	for _, c := range []struct {
		base, prefix string
	}{
		{"", "/clusters/open"},
		{"", "/clusters/op%65n"},
		{"", "/clusters/%6F%70%65%6E"},
		{"", "/clusters%2fopen"}, // one segment, no cluster: refused below
		{"/tether", "/tether/clusters/open"},
		{"/tether", "/t%65ther/clusters/op%65n"},
	} {
		fc := fakecluster.New(t)
		h, _ := proxyHub(t, fc, "", func(cfg *Config) { cfg.BasePath = c.base })
		for _, method := range []string{"GET", "POST"} {
			code, body, _ := call(t, method, h.url+c.prefix+path, aliceToken, nil)
			if strings.Contains(c.prefix, "%2f") {
				if code != http.StatusNotFound {
					t.Errorf("%s %s: %d %s, want 404", method, c.prefix, code, body)
				}
				continue
			}
			var got struct{ Path string }
			if err := json.Unmarshal([]byte(body), &got); code != 200 || err != nil {
				t.Fatalf("%s %s: %d %s", method, c.prefix, code, body)
			}
			if got.Path != path {
				t.Errorf("%s %s: the API server saw %q, want %q", method, c.prefix, got.Path, path)
			}
		}
	}
}
