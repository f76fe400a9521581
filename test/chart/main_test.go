// Package chart tests the Helm chart in charts/tether: that helm lints and
// renders it in both modes and with each option, that its schema refuses
// what it should, and that a real kube-apiserver (internal/localkube)
// accepts every manifest and grants the agent's ServiceAccount exactly what
// SPEC section 6 says. The end-to-end test that runs the agent with the
// chart's RBAC is in test/e2e (TestAgentWithTheChartsRBAC).
package chart

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/localkube"
)

// cluster is the API server the tests share, started by the first test
// that needs one (it takes seconds) and stopped after the last.
var (
	clusterOnce sync.Once
	cluster     *localkube.Cluster
	clusterErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if cluster != nil {
		if err := cluster.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "stop the test API server:", err)
		}
	}
	os.Exit(code)
}

// apiServer returns the shared API server, starting it the first time.
func apiServer(t *testing.T) *localkube.Cluster {
	t.Helper()
	clusterOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		cluster, clusterErr = localkube.Start(ctx, localkube.Config{Logger: log})
	})
	if clusterErr != nil {
		t.Fatalf("start the test API server: %v", clusterErr)
	}
	return cluster
}
