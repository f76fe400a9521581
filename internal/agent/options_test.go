package agent

import (
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/pki"
)

// saDir makes a service account directory with the given files.
func saDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestOptionsFromEnv(t *testing.T) {
	ca, err := pki.NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	goodSA := saDir(t, map[string]string{"token": "sa-token\n", "ca.crt": string(ca.CertPEM)})
	hubCA := filepath.Join(goodSA, "ca.crt")
	base := map[string]string{
		"TETHER_HUB_URL":            "https://tether.example.com/base/",
		"TETHER_AGENT_TOKEN":        "  secret-agent-token\n",
		"TETHER_SERVICEACCOUNT_DIR": goodSA,
		"KUBERNETES_SERVICE_HOST":   "10.0.0.1",
	}
	env := func(over map[string]string) Getenv {
		return func(k string) string {
			if v, ok := over[k]; ok {
				return v
			}
			return base[k]
		}
	}

	o, err := OptionsFromEnv(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if o.HubURL.String() != "https://tether.example.com/base" || o.Name != "in-cluster" || o.Token != "secret-agent-token" ||
		o.HealthAddr != ":8081" || o.TokenReread != time.Minute || o.APIServer != "10.0.0.1:443" || o.StrictMode {
		t.Errorf("defaults: %+v", o)
	}
	o, err = OptionsFromEnv(env(map[string]string{"TETHER_HEALTH_ADDR": "0", "KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "6443", "TETHER_HUB_CA": hubCA, "TETHER_TOKEN_REREAD_SECONDS": "5",
		"TETHER_ALLOWED_NAMESPACES": " team-a, team-b,team-a,", "TETHER_ISTIO_GATEWAY_TIE_BREAKER": "istio-system/public",
		"TETHER_STRICT_MODE": "true", "TETHER_INVENTORY": "false", "TETHER_PROXY": "true", "TETHER_INVENTORY_KINDS_EXTRA": "cert-manager.io/v1/certificates"}))
	if err != nil {
		t.Fatal(err)
	}
	if o.HealthAddr != "" || o.APIServer != "[fd00::1]:6443" || o.TokenReread != 5*time.Second ||
		!slices.Equal(o.AllowedNamespaces, []string{"team-a", "team-b"}) || o.GatewayTieBreaker != "istio-system/public" || !o.StrictMode ||
		!o.InventoryOff || o.ProxyOff || len(o.ExtraKinds) != 1 || o.ExtraKinds[0].Name != "certificates.cert-manager.io" {
		t.Errorf("overrides: %+v", o)
	}

	// Blank counts as unset, as for every setting (docs/SETTINGS.md).
	if o, err := OptionsFromEnv(env(map[string]string{"TETHER_TOKEN_REREAD_SECONDS": " "})); err != nil || o.TokenReread != time.Minute {
		t.Errorf("a blank TETHER_TOKEN_REREAD_SECONDS: %v, %v; want the default, a minute", o.TokenReread, err)
	}

	tests := []struct {
		name string
		over map[string]string
		want string
	}{
		{"no hub URL", map[string]string{"TETHER_HUB_URL": ""}, "TETHER_HUB_URL must be set"},
		{"hub URL without scheme", map[string]string{"TETHER_HUB_URL": "tether.example.com"},
			`TETHER_HUB_URL must be the hub's address, like https://tether.example.com, not "tether.example.com"`},
		{"hub URL with ws scheme", map[string]string{"TETHER_HUB_URL": "wss://tether.example.com"},
			`TETHER_HUB_URL must be the hub's address, like https://tether.example.com, not "wss://tether.example.com"`},
		{"hub URL with a query", map[string]string{"TETHER_HUB_URL": "https://h.example.com/?a=b"}, "without a query"},
		{"hub URL ending in a bare ?", map[string]string{"TETHER_HUB_URL": "https://h.example.com?"}, "without a query"},
		{"hub URL without host", map[string]string{"TETHER_HUB_URL": "https:///x"}, "TETHER_HUB_URL must be the hub's address"},
		{"hub URL with a port past 65535", map[string]string{"TETHER_HUB_URL": "https://tether.example.com:99999"},
			`TETHER_HUB_URL must be the hub's address, with a port from 1 to 65535 if any, like https://tether.example.com:8443, not "https://tether.example.com:99999"`},
		{"hub URL with port 0", map[string]string{"TETHER_HUB_URL": "https://tether.example.com:0/tether"}, "with a port from 1 to 65535"},
		{"hub URL with a password", map[string]string{"TETHER_HUB_URL": "https://me:hunter2@tether.example.com"},
			`TETHER_HUB_URL must be the hub's address, like https://tether.example.com, not "https://me:xxxxx@tether.example.com"`},
		{"hub URL with a password that doesn't parse", map[string]string{"TETHER_HUB_URL": "https://me:hunter2@tether.example.com/%zz"},
			`TETHER_HUB_URL must be the hub's address, like https://tether.example.com, not "https://xxxxx@tether.example.com/%zz"`},
		{"bad name", map[string]string{"TETHER_AGENT_NAME": "EU_1"}, `TETHER_AGENT_NAME must be the cluster's name in the hub's agents list: "EU_1" is not a DNS label`},
		{"no token", map[string]string{"TETHER_AGENT_TOKEN": " \n"}, "TETHER_AGENT_TOKEN must be set"},
		{"token on two lines", map[string]string{"TETHER_AGENT_TOKEN": "secret-agent-token\nsecret-agent-token"}, "TETHER_AGENT_TOKEN must be the token on one line"},
		{"bad health address", map[string]string{"TETHER_HEALTH_ADDR": "8081"}, `TETHER_HEALTH_ADDR must be an address like :8081, or 0 to turn it off, not "8081"`},
		{"bad reread", map[string]string{"TETHER_TOKEN_REREAD_SECONDS": "0"}, `TETHER_TOKEN_REREAD_SECONDS must be a whole number of seconds, at least 1, not "0"`},
		{"reread past a Duration", map[string]string{"TETHER_TOKEN_REREAD_SECONDS": "88888888860"}, `TETHER_TOKEN_REREAD_SECONDS must be at most 31536000 seconds (a year), not "88888888860"`},
		{"no API server", map[string]string{"KUBERNETES_SERVICE_HOST": ""}, "KUBERNETES_SERVICE_HOST must be set"},
		{"API server with a space", map[string]string{"KUBERNETES_SERVICE_HOST": "10.0.0.1 x"}, `KUBERNETES_SERVICE_HOST must be a host name or IP address, not "10.0.0.1 x"`},
		{"default service account directory", map[string]string{"TETHER_SERVICEACCOUNT_DIR": ""}, "/var/run/secrets/kubernetes.io/serviceaccount"},
		{"bad API port", map[string]string{"KUBERNETES_SERVICE_PORT": "https"}, `KUBERNETES_SERVICE_PORT must be a port number from 1 to 65535, not "https"`},
		{"no service account token", map[string]string{"TETHER_SERVICEACCOUNT_DIR": saDir(t, map[string]string{"ca.crt": string(ca.CertPEM)})},
			"No service account token in "},
		{"empty service account token", map[string]string{"TETHER_SERVICEACCOUNT_DIR": saDir(t, map[string]string{"token": "", "ca.crt": string(ca.CertPEM)})},
			"the agent needs its pod's token (automountServiceAccountToken)"},
		{"no ca.crt", map[string]string{"TETHER_SERVICEACCOUNT_DIR": saDir(t, map[string]string{"token": "t"})}, "No CA certificate at "},
		{"empty ca.crt", map[string]string{"TETHER_SERVICEACCOUNT_DIR": saDir(t, map[string]string{"token": "t", "ca.crt": ""})}, "the file is empty or holds no PEM certificate"},
		{"garbage ca.crt", map[string]string{"TETHER_SERVICEACCOUNT_DIR": saDir(t, map[string]string{"token": "t", "ca.crt": "not a cert"})}, "holds no PEM certificate"},
		{"bad namespace", map[string]string{"TETHER_ALLOWED_NAMESPACES": "team-a,Team_B"}, `TETHER_ALLOWED_NAMESPACES must be namespace names separated by commas, like team-a,team-b; "Team_B" is not a namespace name`},
		{"bad tie breaker", map[string]string{"TETHER_ISTIO_GATEWAY_TIE_BREAKER": "public"}, `TETHER_ISTIO_GATEWAY_TIE_BREAKER must name an Istio Gateway as namespace/name, like istio-system/public, not "public"`},
		{"strict mode not a boolean", map[string]string{"TETHER_STRICT_MODE": "yes"}, `TETHER_STRICT_MODE must be true or false, not "yes"`},
		{"inventory neither true nor false", map[string]string{"TETHER_INVENTORY": "no"}, `TETHER_INVENTORY must be true or false, not "no"`},
		{"proxy neither true nor false", map[string]string{"TETHER_PROXY": "off"}, `TETHER_PROXY must be true or false, not "off"`},
		{"both halves off", map[string]string{"TETHER_PROXY": "false", "TETHER_INVENTORY": "false"}, `TETHER_PROXY and TETHER_INVENTORY are both false: the agent would do nothing`},
		{"extra kinds naming Secrets", map[string]string{"TETHER_INVENTORY_KINDS_EXTRA": "v1/configmaps,v1/secrets"},
			`TETHER_INVENTORY_KINDS_EXTRA (chart: inventory.extraKinds) names Secrets: "v1/secrets": the inventory never reads Secrets`},
		{"extra kinds malformed", map[string]string{"TETHER_INVENTORY_KINDS_EXTRA": "configmaps"},
			`TETHER_INVENTORY_KINDS_EXTRA (chart: inventory.extraKinds) must be group/version/resource, separated by commas: "configmaps" is not group/version/resource`},
		{"missing hub CA", map[string]string{"TETHER_HUB_CA": "/nonexistent/ca.pem"}, "TETHER_HUB_CA must be a PEM file of CA certificates"},
		{"bad hub CA", map[string]string{"TETHER_HUB_CA": filepath.Join(goodSA, "token")}, "TETHER_HUB_CA must be a PEM file of CA certificates"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := OptionsFromEnv(env(tt.over))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v, want one containing %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q is more than one line", err)
			}
			if strings.Contains(err.Error(), "secret-agent-token") || strings.Contains(err.Error(), "sa-token") {
				t.Errorf("error %q holds a token", err)
			}
		})
	}
}

func TestBackoffSchedule(t *testing.T) {
	for attempt, want := range []float64{1, 2, 4, 8, 15, 30, 30, 30} {
		lo, mid, hi := backoff(attempt, 0), backoff(attempt, 0.5), backoff(attempt, 0.999999)
		if mid.Seconds() != want || lo.Seconds() != 0.8*want || hi.Seconds() < 1.19*want || hi.Seconds() > 1.2*want {
			t.Errorf("attempt %d: %s %s %s, want %v s ± 20 %%", attempt, lo, mid, hi, want)
		}
	}
}

// TestInventoryOffMakesNoWatcher: with TETHER_INVENTORY=false the agent
// has no watcher, so it starts no watch and opens no inventory stream.
func TestInventoryOffMakesNoWatcher(t *testing.T) {
	ca, err := pki.NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := saDir(t, map[string]string{"token": "sa-token\n", "ca.crt": string(ca.CertPEM)})
	o := Options{APIServer: "127.0.0.1:6443", ServiceAccountDir: dir}
	log := slog.New(slog.DiscardHandler)
	if w, err := NewWatcher(o, log); err != nil || w == nil {
		t.Fatalf("inventory on: %v, %v; want a watcher", w, err)
	}
	o.InventoryOff = true
	if w, err := NewWatcher(o, log); err != nil || w != nil {
		t.Fatalf("inventory off: %v, %v; want none", w, err)
	}
}
