package server

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tetherhq/tether/internal/auth"
)

// FuzzBasePath: any TETHER_BASE_PATH the settings take gives the hub routes
// it can serve (the router panics on an invalid or clashing pattern), and
// its pages are found under it.
func FuzzBasePath(f *testing.F) {
	for _, p := range []string{"/", "/tether", "/tether/", "/k8s/hub", "/api", "/api/v1", "/version", "/healthz", "/clusters", "/static", "/a b", "/{x}", "/x//y", "/.."} {
		f.Add(p)
	}
	h := fuzzHub(f, auth.Config{Users: testUsers})
	f.Fuzz(func(t *testing.T, p string) {
		_, err := OptionsFromEnv(func(k string) string {
			return map[string]string{"TETHER_BASE_PATH": p, "TETHER_USERS": testUsers}[k]
		}, false)
		if err != nil {
			return
		}
		h.cfg.BasePath = p
		handler := h.Handler() // panics on a pattern the router can't take
		base := strings.TrimSuffix(p, "/")
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, httptest.NewRequest("GET", base+"/api/clusters", nil))
		if rec.Code != http.StatusUnauthorized {
			t.Fatalf("base path %q: GET %s/api/clusters answered %d, want 401 (found, and asks who you are)", p, base, rec.Code)
		}
	})
}

// fuzzHub is a hub whose people are cfg's, with one cluster, c, and no
// agent: enough for what runs on a request alone. It starts nothing.
func fuzzHub(f *testing.F, cfg auth.Config) *Hub {
	people, err := auth.New(cfg)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { people.Close() })
	h, err := New(Config{Agents: testAgents("c"), Auth: people})
	if err != nil {
		f.Fatal(err)
	}
	return h
}
