package hub

import (
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/clock"
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

// A probe that gave up while its connection was being made leaves the dial
// under way (net/http dials on, for the next request): the next probe
// takes that connection rather than dial another, which would hold
// another of the hub's turns and make another handshake. The hub's clock
// is the test's; the cluster's handshakes are held.
func TestAProbeWaitsForTheDialUnderWay(t *testing.T) {
	const interval = 10 * time.Second
	fc := fakecluster.New(t)
	gate := make(chan struct{})
	fc.HandshakeGate.Store(&gate)
	released := false
	t.Cleanup(func() { // before the hub and the cluster close
		if !released {
			close(gate)
		}
	})
	clk := clock.NewFake(time.Now())
	h := startHub(t, Config{Agents: testAgents("eu-1"), ProbeInterval: interval, ProbeTimeout: 100 * time.Millisecond, Heartbeat: time.Hour, Clock: clk})
	a := startAgent(t, h.url, "eu-1", fc)
	eventually(t, 5*time.Second, "connected", a.Connected)
	// Its heartbeat's timer and its probes' (due now).
	eventually(t, 5*time.Second, "the first probe planned", func() bool { d, ok := clk.Next(); return ok && d == 0 && clk.Timers() == 2 })
	c := h.connected("eu-1")
	clk.Step(0)
	const gaveUp = "Unreachable: its API server didn't answer /readyz within 100ms"
	eventually(t, 5*time.Second, "the first probe given up, its handshake held", func() bool {
		return statusOf(h, "eu-1") == gaveUp && fc.Handshaking.Load() == 1
	})
	for i := range 3 {
		eventually(t, 5*time.Second, "the next probe planned", func() bool { d, ok := clk.Next(); return ok && d == interval && clk.Timers() == 2 })
		clk.Step(interval)
		eventually(t, 5*time.Second, "the probe done", func() bool { d, ok := clk.Next(); return ok && d == interval && clk.Timers() == 2 })
		if n, held := c.ownDials.Load(), fc.Handshaking.Load(); n != 1 || held != 1 {
			t.Fatalf("after probe %d: %d of the hub's own dials under way and %d handshakes held, want 1 and 1", i+2, n, held)
		}
		if got := statusOf(h, "eu-1"); got != gaveUp {
			t.Fatalf("after probe %d: %q, want it as the first left it", i+2, got)
		}
	}
	close(gate)
	released = true
	eventually(t, 5*time.Second, "the dial done", func() bool { return c.ownDials.Load() == 0 })
	clk.Step(interval)
	eventually(t, 5*time.Second, "Ready on the connection the first probe asked for", func() bool { return statusOf(h, "eu-1") == Ready })
	if n := fc.Count("/readyz"); n != 1 {
		t.Errorf("%d probes reached /readyz, want 1", n)
	}
}
