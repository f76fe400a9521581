package hub

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/clock"
	"github.com/tetherhq/tether/internal/protocol"
	"github.com/tetherhq/tether/internal/testutil/agenttest"
	"github.com/tetherhq/tether/internal/testutil/fakecluster"
	"github.com/tetherhq/tether/internal/tunnel"
)

// helloAs connects a raw agent of cluster name that says moves or not, and
// returns its control stream once welcomed.
func helloAs(t *testing.T, h *testHub, fc *fakecluster.Cluster, name string, moves bool) net.Conn {
	t.Helper()
	hello := helloFor(fc)
	hello.Moves = moves
	return helloWith(t, h, name, hello)
}

// helloWith connects a raw agent of cluster name that says hello, and
// returns its control stream once welcomed.
func helloWith(t *testing.T, h *testHub, name string, hello protocol.Message) net.Conn {
	t.Helper()
	return helloOn(t, agenttest.Raw(t, h.url, name, testToken), hello)
}

// helloOn says hello on sess, and returns its control stream once
// welcomed.
func helloOn(t *testing.T, sess *tunnel.Session, hello protocol.Message) net.Conn {
	t.Helper()
	ctl, err := sess.Open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := protocol.Write(ctl, hello); err != nil {
		t.Fatal(err)
	}
	if m, err := protocol.Read(ctl); err != nil || m.Type != protocol.TypeWelcome {
		t.Fatalf("hello answered %+v, %v", m, err)
	}
	return ctl
}

// nextMessage reads ctl's next message other than a ping.
func nextMessage(ctl net.Conn) (protocol.Message, error) {
	for {
		ctl.SetReadDeadline(time.Now().Add(5 * time.Second))
		m, err := protocol.Read(ctl)
		if err != nil || m.Type != protocol.TypePing {
			return m, err
		}
	}
}

// TestDrainMovesAgentsWithoutTakeover: a draining hub asks agents that can
// move to connect again elsewhere; once another replica claims the cluster
// it routes there, and lets the old connection go without telling it of a
// takeover. An agent from before moves gets no move, and a newer claim
// takes it over as before. New agents are refused while draining.
func TestDrainMovesAgentsWithoutTakeover(t *testing.T) {
	fc := fakecluster.New(t)
	h := startHub(t, Config{Agents: testAgents("eu-1", "us-1"), Replica: "hub-a", Heartbeat: time.Hour, ProbeInterval: time.Hour})
	mover := helloAs(t, h, fc, "eu-1", true)
	old := helloAs(t, h, fc, "us-1", false)
	eventually(t, 5*time.Second, "both registered", func() bool { return h.Local("eu-1") != nil && h.Local("us-1") != nil })

	h.SetReplicas(2)
	h.Drain()
	if m, err := nextMessage(mover); err != nil || m.Type != protocol.TypeGoAway || m.Reason != protocol.ReasonMove {
		t.Fatalf("the agent that can move got %+v, %v; want a goaway to move", m, err)
	}
	if h.Local("eu-1") == nil {
		t.Error("the agent asked to move was dropped before its new connection came")
	}
	if code := upgradeStatus(t, h.url, "eu-1"); code != 503 {
		t.Errorf("a new agent while draining: %d, want 503", code)
	}
	// Until its new connection is claimed, the mover is waited for; the
	// agent from before moves is not.
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	if n, err := h.WaitMoved(stopped); n != 1 || err == nil {
		t.Errorf("WaitMoved before the move = %d, %v; want 1 left and the context's error", n, err)
	}

	later := time.Now().Add(time.Hour)
	h.SetClaim("hub-b", "eu-1", &Claim{Since: later, Upstream: claimUpstream{}})
	h.SetClaim("hub-b", "us-1", &Claim{Since: later, Upstream: claimUpstream{}})
	if up := h.Reach("eu-1"); up != (claimUpstream{}) {
		t.Errorf("Reach(eu-1) = %v, want hub-b's", up)
	}
	if h.Local("eu-1") != nil {
		t.Error("the moved agent's connection still takes requests")
	}
	if n, err := h.WaitMoved(stopped); n != 0 || err != nil {
		t.Errorf("WaitMoved once moved = %d, %v; want none left", n, err)
	}
	m, err := nextMessage(mover)
	if err == nil && m.Type == protocol.TypeGoAway && m.Reason == protocol.ReasonTakeover {
		t.Errorf("the agent that moved was told of a takeover")
	}
	if err == nil {
		t.Errorf("the moved connection, with no streams open, got %+v and stayed open", m)
	}
	if m, err := nextMessage(old); err != nil || m.Type != protocol.TypeGoAway || m.Reason != protocol.ReasonTakeover {
		t.Errorf("the agent from before moves got %+v, %v; want a takeover", m, err)
	}
}

// numbered is n cluster names, c00 onwards.
func numbered(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("c%02d", i)
	}
	return names
}

// askedToMove counts h's agents asked to move.
func askedToMove(h *testHub) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, c := range h.agents {
		if c.moving.Load() {
			n++
		}
	}
	return n
}

// upgradeStatus is the status of an agent's WebSocket upgrade as cluster
// name, the token right.
func upgradeStatus(t *testing.T, hubURL, name string) int {
	t.Helper()
	code, _ := upgrade(t, hubURL, name, false)
	return code
}

// upgrade makes an agent's WebSocket upgrade as cluster name, the token
// right, saying it moves or not (protocol.MoveHeader), and returns the
// answer's status and Retry-After.
func upgrade(t *testing.T, hubURL, name string, move bool) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, hubURL+"/api/agent", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set(protocol.AgentHeader, name)
	if move {
		req.Header.Set(protocol.MoveHeader, "1")
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Retry-After")
}

// TestDrainAsksAtTheOthersPace: a draining replica asks its agents to move
// a tenth of the others' admission pace each tenth of a second, not all at
// once, so they aren't refused (and retry) by the dozen.
func TestDrainAsksAtTheOthersPace(t *testing.T) {
	fc := fakecluster.New(t)
	names := numbered(25)
	clk := clock.NewFake(time.Now())
	// Two replicas of 25 listed agents: the other admits the smallest
	// pace, 100 a second, so 10 are asked each tick.
	h := startHub(t, Config{Agents: testAgents(names...), Replica: "hub-a", Heartbeat: time.Hour, ProbeInterval: time.Hour, Clock: clk})
	for _, n := range names {
		helloAs(t, h, fc, n, true)
	}
	h.SetReplicas(2)
	h.Drain()
	for _, want := range []int{10, 20, 25} {
		eventually(t, 5*time.Second, fmt.Sprintf("%d agents asked to move", want), func() bool { return askedToMove(h) >= want })
		// Only the clock lets more be asked.
		if got := askedToMove(h); got != want {
			t.Fatalf("%d agents asked to move before the clock moved on, want %d", got, want)
		}
		if want < len(names) {
			eventually(t, 5*time.Second, "the next tick's timer", func() bool { d, ok := clk.Next(); return ok && d <= moveTick })
			clk.Step(moveTick)
		}
	}
}

// TestALoneReplicaMovesNoAgent: with no other replica to move to, a
// draining replica asks none of its agents to move, and doesn't wait for
// them: they are let go at shutdown, as from a hub that stops.
func TestALoneReplicaMovesNoAgent(t *testing.T) {
	fc := fakecluster.New(t)
	h := startHub(t, Config{Agents: testAgents("eu-1"), Replica: "hub-a", Heartbeat: time.Hour, ProbeInterval: time.Hour})
	helloAs(t, h, fc, "eu-1", true)
	h.SetReplicas(1)
	h.Drain()
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	if n, err := h.WaitMoved(stopped); n != 0 || err != nil {
		t.Errorf("WaitMoved on a lone replica = %d, %v; want none to wait for", n, err)
	}
}

// TestAMovedConnectionClosesThoughItsProbeKeptOne: the connection an agent
// moved from closes once another replica claims the cluster, though the
// probes kept a connection to the API server open on it. It stayed open
// until the hub stopped: harmless on a replica that drains and stops, not
// on one that asks agents to move and goes on (balance.go).
func TestAMovedConnectionClosesThoughItsProbeKeptOne(t *testing.T) {
	fc := fakecluster.New(t)
	h := startHub(t, Config{Agents: testAgents("eu-1"), Replica: "hub-a", Heartbeat: time.Hour, ProbeInterval: time.Hour})
	startAgent(t, h.url, "eu-1", fc)
	eventually(t, 5*time.Second, "eu-1 Ready", func() bool { return statusOf(h, "eu-1") == "Ready" })
	h.mu.Lock()
	c := h.agents["eu-1"]
	h.mu.Unlock()
	if c.apiStreams() == 0 {
		t.Fatal("the probe kept no connection open: the test tests nothing")
	}
	h.SetReplicas(2)
	h.Drain()
	eventually(t, 5*time.Second, "eu-1 asked to move", c.moving.Load)
	h.SetClaim("hub-b", "eu-1", &Claim{Since: time.Now().Add(time.Hour), Upstream: claimUpstream{}})
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
		t.Fatalf("the connection moved from is still open 5 s after the move, %d streams on it", c.apiStreams())
	}
}

// TestAMovedConnectionRecordsNoStatus: a probe that was under way on a
// connection when its agent moved records nothing when it ends, and the
// connection is probed no more: the cluster's status is its new holder's.
// Recorded, a probe cut short on the old connection would have made the
// cluster Unreachable here while its agent is fine elsewhere.
func TestAMovedConnectionRecordsNoStatus(t *testing.T) {
	fc := fakecluster.New(t)
	gate := make(chan struct{})
	fc.ReadyzGate.Store(&gate)
	h := startHub(t, Config{Agents: testAgents("eu-1"), Replica: "hub-a", Heartbeat: time.Hour, ProbeInterval: time.Hour})
	startAgent(t, h.url, "eu-1", fc)
	eventually(t, 5*time.Second, "the first probe at /readyz", func() bool { return fc.Count("/readyz") == 1 })
	h.mu.Lock()
	c := h.agents["eu-1"]
	h.mu.Unlock()
	c.moving.Store(true)
	h.SetClaim("hub-b", "eu-1", &Claim{Since: time.Now().Add(time.Hour), Upstream: claimUpstream{}})
	gate <- struct{}{} // the probe under way ends: the API server is ready
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the connection moved from is still open 5 s after its probe ended")
	}
	// The agent, its old connection closed, connects here again; that
	// connection's first probe waits at the gate, so nothing but the old
	// connection's probe can have recorded a status.
	h.mu.Lock()
	st, recorded := h.status["eu-1"]
	h.mu.Unlock()
	if recorded {
		t.Errorf("the probe of the connection moved from recorded %+v", st.ClusterStatus)
	}
}
