package replicas

import (
	"context"
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestJoinRefusesBadConfig: the hub passes its settings through; the errors name them.
func TestJoinRefusesBadConfig(t *testing.T) {
	good := Config{
		Client:      &Client{},
		Namespace:   "tether",
		Name:        "hub-0",
		PeerAddr:    "10.0.0.1:8444",
		SigningKeys: []ed25519.PrivateKey{newKey(t)},
	}
	tests := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"no client", func(c *Config) { c.Client = nil }, "no Kubernetes client"},
		{"no namespace", func(c *Config) { c.Namespace = "" }, "TETHER_COORDINATION_NAMESPACE is empty"},
		{"bad namespace", func(c *Config) { c.Namespace = "Tether_NS" }, `TETHER_COORDINATION_NAMESPACE "Tether_NS"`},
		{"no name", func(c *Config) { c.Name = "" }, "TETHER_REPLICA_NAME is empty"},
		{"bad name", func(c *Config) { c.Name = "Hub_0" }, `TETHER_REPLICA_NAME "Hub_0"`},
		{"name too long", func(c *Config) { c.Name = strings.Repeat("a", 250) }, "TETHER_REPLICA_NAME"},
		{"no address", func(c *Config) { c.PeerAddr = "" }, "TETHER_PEER_ADDR"},
		{"address without port", func(c *Config) { c.PeerAddr = "10.0.0.1" }, "TETHER_PEER_ADDR"},
		{"address without host", func(c *Config) { c.PeerAddr = ":8444" }, "TETHER_PEER_ADDR"},
		{"no signing key", func(c *Config) { c.SigningKeys = nil }, "TETHER_TOKEN_SIGNING_KEY_FILE is required"},
		{"renewal as long as the lease", func(c *Config) { c.LeaseDuration, c.RenewInterval = time.Second, time.Second }, "shorter than the lease duration"},
		{"renewal over the default lease", func(c *Config) { c.RenewInterval = time.Minute }, "shorter than the lease duration"},
		{"negative", func(c *Config) { c.LeaseDuration = -time.Second }, "negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := good
			tt.edit(&cfg)
			r, err := Join(context.Background(), cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Join = %v, %v; want an error with %q", r, err, tt.want)
			}
		})
	}
}

func TestClientFromEnv(t *testing.T) {
	if _, err := ClientFromEnv(apiServer(t).AdminKubeconfig); err != nil {
		t.Errorf("the test API server's kubeconfig: %v", err)
	}
	missing := filepath.Join(t.TempDir(), "missing")
	if _, err := ClientFromEnv(missing); err == nil || !strings.Contains(err.Error(), "KUBECONFIG "+missing) {
		t.Errorf("a missing kubeconfig: %v", err)
	}
	if _, err := os.Stat("/var/run/secrets/kubernetes.io/serviceaccount/token"); errors.Is(err, os.ErrNotExist) {
		if _, err := ClientFromEnv(""); err == nil || !strings.Contains(err.Error(), "KUBECONFIG is not set") {
			t.Errorf("outside a pod, without KUBECONFIG: %v", err)
		}
	}
}
