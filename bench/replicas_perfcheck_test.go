//go:build perfcheck

package main

import (
	"context"
	"testing"
	"time"
)

// TestPerfReplicas is the short version of the replicas part (issue 35):
// three replicas coordinated through a real API server, a request forwarded
// to the replica holding the agent against the same request straight to it,
// 300 simulated agents spread over the replicas, and one replica killed
// under them. Its figures are held to the same CI bounds as the others'
// (ciBound), among them the guards named there.
func TestPerfReplicas(t *testing.T) {
	checkPart(t, func(ctx context.Context, r *report, dir string) error {
		return benchReplicas(ctx, r, dir, replicaOpts{replicas: 3, perHub: 100, h2Gets: 300, lists: 3,
			settle: 2 * time.Second, window: 6 * time.Second, kill: true})
	})
}
