package hub

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/testutil/agenttest"
	"github.com/tetherhq/tether/internal/testutil/fakecluster"
)

// TestDefaults: a hub given no durations takes SPEC's: probes every 10 s
// with a 5 s timeout (section 2), a 60 s permission cache (section 5), and
// 10 s for an agent's hello. Serve leaves them zero, so these are the
// hub's in production.
func TestDefaults(t *testing.T) {
	h, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for _, d := range []struct {
		name      string
		got, want time.Duration
	}{
		{"ProbeInterval", h.cfg.ProbeInterval, 10 * time.Second},
		{"ProbeTimeout", h.cfg.ProbeTimeout, 5 * time.Second},
		{"HelloTimeout", h.cfg.HelloTimeout, 10 * time.Second},
	} {
		if d.got != d.want {
			t.Errorf("%s = %s, want %s", d.name, d.got, d.want)
		}
	}
}

// TestProbesKeepATransportOnlyWithAConnection: an agent whose API server
// can't be reached leaves the hub no transport of its own between probes
// (net/http's keeps, after a request, the wait for an idle connection: 2
// KiB an agent); one whose API server answers keeps the transport, with
// the connection the next probe takes (decision 019).
func TestProbesKeepATransportOnlyWithAConnection(t *testing.T) {
	ownTransport := func(h *testHub) (*http.Transport, int) {
		h.mu.Lock()
		c := h.agents["eu-1"]
		h.mu.Unlock()
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.ownTransport, c.ownUsers
	}
	t.Run("unreachable", func(t *testing.T) {
		fc := fakecluster.New(t)
		h := startHub(t, Config{Agents: testAgents("eu-1"), ProbeInterval: 50 * time.Millisecond})
		a := agenttest.Start(t, h.url, "eu-1", testToken, fc.SADir, freeAddr(t))
		eventually(t, 5*time.Second, "connected", a.Connected)
		eventually(t, 5*time.Second, "the agent's account of its dial", func() bool {
			return strings.HasPrefix(statusOf(h, "eu-1"), "Unreachable: the agent says: ")
		})
		// Probes come every 50 ms: look between two.
		eventually(t, 5*time.Second, "no transport kept", func() bool {
			tr, users := ownTransport(h)
			return tr == nil && users == 0
		})
	})
	t.Run("answering", func(t *testing.T) {
		fc := fakecluster.New(t)
		h := startHub(t, Config{Agents: testAgents("eu-1"), ProbeInterval: 50 * time.Millisecond})
		a := startAgent(t, h.url, "eu-1", fc)
		eventually(t, 5*time.Second, "connected", a.Connected)
		eventually(t, 5*time.Second, "five probes", func() bool { return fc.Count("/readyz") >= 5 })
		if tr, _ := ownTransport(h); tr == nil {
			t.Error("an agent whose API server answers keeps no transport of the hub's own")
		}
		if conns := fc.ConnsFor("/readyz"); len(conns) != 1 {
			t.Errorf("five probes came on %d connections (%v), want 1", len(conns), conns)
		}
	})
}
