package hub

import (
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/testutil/fakecluster"
)

// Many agents connecting at once each need a connection, and a TLS
// handshake, for their first probe: the hub dials OwnDials of them at
// once, the others wait their turn, and every cluster comes Ready once the
// handshakes go through.
func TestTheHubsOwnDialsTakeTurns(t *testing.T) {
	names := []string{"eu-1", "eu-2", "eu-3"}
	gate := make(chan struct{})
	var fcs []*fakecluster.Cluster
	for range names {
		fc := fakecluster.New(t)
		fc.HandshakeGate.Store(&gate)
		fcs = append(fcs, fc)
	}
	h := startHub(t, Config{Agents: testAgents(names...), OwnDials: 2, ProbeTimeout: 100 * time.Millisecond})
	released := false
	t.Cleanup(func() { // before the hub and the clusters close
		if !released {
			close(gate)
		}
	})
	for i, n := range names {
		a := startAgent(t, h.url, n, fcs[i])
		eventually(t, 5*time.Second, n+" connected", a.Connected)
	}
	handshaking := func() int {
		n := 0
		for _, fc := range fcs {
			n += int(fc.Handshaking.Load())
		}
		return n
	}
	// Probes go on every 200 ms, each dialing anew while the first dial
	// is held: without turns, 3 handshakes are held at once, then more.
	eventually(t, 5*time.Second, "every cluster's probe given up, two handshakes held and no more", func() bool {
		for _, n := range names {
			if !strings.HasPrefix(statusOf(h, n), "Unreachable: its API server didn't answer /readyz within") {
				return false
			}
		}
		return handshaking() == 2
	})
	close(gate)
	released = true
	for _, n := range names {
		eventually(t, 5*time.Second, n+" Ready", func() bool { return statusOf(h, n) == "Ready" })
	}
}
