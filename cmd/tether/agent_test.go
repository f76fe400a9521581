package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/pki"
	"github.com/tetherhq/tether/internal/version"
)

// TestAgentStopsOnBadSettingsAndRefusals: SPEC section 1, at the binary.
// Bad settings stop the agent at once, exit status non-zero, one line that
// names the setting; a hub's refusal (401) stops it too, exit non-zero,
// after its start line and the refusal's line, and neither holds the token.
func TestAgentStopsOnBadSettingsAndRefusals(t *testing.T) {
	const token = "agent-token-0123456789abcdef0123456789"
	ca, err := pki.NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	sa := t.TempDir()
	for name, content := range map[string]string{"token": "sa-token\n", "ca.crt": string(ca.CertPEM)} {
		if err := os.WriteFile(filepath.Join(sa, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var upgrades []http.Header
	hub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/agent" {
			mu.Lock()
			upgrades = append(upgrades, r.Header.Clone())
			mu.Unlock()
		}
		http.Error(w, "no", http.StatusUnauthorized)
	}))
	defer hub.Close()
	t.Setenv("TETHER_HUB_URL", "")
	t.Setenv("TETHER_AGENT_NAME", "")
	t.Setenv("TETHER_AGENT_TOKEN", "  "+token+"\n")
	t.Setenv("TETHER_HEALTH_ADDR", "0")
	t.Setenv("TETHER_SERVICEACCOUNT_DIR", sa)
	t.Setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
	t.Setenv("KUBERNETES_SERVICE_PORT", "1")
	t.Setenv("TETHER_LOG_FORMAT", "")

	var out, errOut bytes.Buffer
	if code := run([]string{"agent"}, &out, &errOut); code == 0 || errOut.String() != "TETHER_HUB_URL must be set\n" {
		t.Errorf("no TETHER_HUB_URL: exit %d, %q; want non-zero and the one line SPEC gives", code, errOut.String())
	}

	t.Setenv("TETHER_HUB_URL", hub.URL)
	out.Reset()
	errOut.Reset()
	done := make(chan int, 1)
	go func() { done <- run([]string{"agent"}, &out, &errOut) }()
	var code int
	select {
	case code = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("a refused agent didn't stop")
	}
	logs := errOut.String()
	if code == 0 {
		t.Errorf("a refused agent exited 0:\n%s", logs)
	}
	for _, line := range []string{
		"Tether " + version.Version + ` agent for "in-cluster", relaying to 127.0.0.1:1`,
		"The hub at " + hub.URL + " refused this agent: it doesn't know this name and token.",
	} {
		if !strings.Contains(logs, line) {
			t.Errorf("the agent's log lacks %q:\n%s", line, logs)
		}
	}
	if strings.Contains(logs, token) || strings.Contains(logs, "sa-token") {
		t.Errorf("a log line holds a token:\n%s", logs)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(upgrades) != 1 || upgrades[0].Get("Authorization") != "Bearer "+token || upgrades[0].Get("Tether-Agent") != "in-cluster" {
		t.Errorf("upgrade requests %v, want one with Authorization: Bearer <token> and Tether-Agent: in-cluster", upgrades)
	}
}

// TestHubRefusesToStartWithoutSignIn: SPEC section 3, nothing configured to
// sign people in: the hub refuses to start.
func TestHubRefusesToStartWithoutSignIn(t *testing.T) {
	for _, k := range []string{"TETHER_USERS", "TETHER_USERS_FILE", "TETHER_OIDC_ISSUER", "TETHER_AUTH_PROXY_USER_HEADER", "TETHER_FLEET_AGENTS", "TETHER_FLEET_AGENTS_FILE"} {
		t.Setenv(k, "")
	}
	t.Setenv("TETHER_PUBLIC_URL", "https://tether.example.com")
	var out, errOut bytes.Buffer
	if code := run([]string{"hub"}, &out, &errOut); code == 0 || !strings.HasPrefix(errOut.String(), "no way for people to sign in is configured") {
		t.Errorf("exit %d, %q; want non-zero, saying no way to sign in is configured", code, errOut.String())
	}
}
