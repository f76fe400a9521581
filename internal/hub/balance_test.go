package hub

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tetherhq/tether/internal/clock"
	"github.com/tetherhq/tether/internal/protocol"
	"github.com/tetherhq/tether/internal/testutil/agenttest"
	"github.com/tetherhq/tether/internal/testutil/fakecluster"
)

// balanceTickNow runs h's next balance tick on clk and waits until it has
// counted the spread.
func balanceTickNow(t *testing.T, h *testHub, clk *clock.Fake) {
	t.Helper()
	h.mu.Lock()
	h.load = load{share: -1}
	h.mu.Unlock()
	eventually(t, 5*time.Second, "the balance tick's timer", func() bool { d, ok := clk.Next(); return ok && d <= balanceTick })
	clk.Step(balanceTick)
	eventually(t, 5*time.Second, "the balance tick", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.load.share >= 0
	})
}

// TestAReplicaHoldingMoreThanItsShareAsksSomeToMove: a replica holding
// all ten agents while another takes agents and holds none asks the five
// over its share to move, then no more; with the other draining, or gone,
// it asks none.
func TestAReplicaHoldingMoreThanItsShareAsksSomeToMove(t *testing.T) {
	fc := fakecluster.New(t)
	names := numbered(10)
	clk := clock.NewFake(time.Now())
	h := startHub(t, Config{Agents: testAgents(names...), Replica: "hub-a", Heartbeat: time.Hour, ProbeInterval: time.Hour, Clock: clk})
	var ctls []net.Conn
	for _, n := range names {
		ctls = append(ctls, helloAs(t, h, fc, n, true))
	}

	// The other replica's stream hasn't given its account: nothing is
	// known of it, so nothing moves.
	balanceTickNow(t, h, clk)
	if n := askedToMove(h); n != 0 {
		t.Fatalf("%d asked to move with no other replica known", n)
	}
	h.SetPeer("hub-b", true)
	balanceTickNow(t, h, clk)
	if n := askedToMove(h); n != 0 {
		t.Fatalf("%d asked to move with the other replica draining", n)
	}

	h.SetPeer("hub-b", false)
	balanceTickNow(t, h, clk)
	if n := askedToMove(h); n != 5 {
		t.Fatalf("%d asked to move, want the 5 over the share of 10 agents on 2 replicas", n)
	}
	moves := 0
	for _, ctl := range ctls {
		ctl.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if m, err := protocol.Read(ctl); err == nil && m.Type == protocol.TypeGoAway && m.Reason == protocol.ReasonMove {
			moves++
		}
	}
	if moves != 5 {
		t.Errorf("%d agents were told to move, want 5", moves)
	}
	// Those asked count as gone: the next tick asks none.
	balanceTickNow(t, h, clk)
	if n := askedToMove(h); n != 5 {
		t.Errorf("%d asked to move after the second tick, want still 5", n)
	}

	// Once the agents asked have moved to the other, balanced: none more.
	var asked []string
	h.mu.Lock()
	for n, c := range h.agents {
		if c.moving.Load() {
			asked = append(asked, n)
		}
	}
	h.mu.Unlock()
	later := clk.Now().Add(time.Minute)
	for _, n := range asked {
		h.SetClaim("hub-b", n, &Claim{Since: later, Upstream: claimUpstream{}})
	}
	balanceTickNow(t, h, clk)
	if n := askedToMove(h); n != 0 {
		t.Errorf("%d asked to move once balanced (5 each)", n)
	}
	h.mu.Lock()
	l := h.load
	h.mu.Unlock()
	if l != (load{held: 5, share: 5}) {
		t.Errorf("the load counted %+v, want 5 held of a share of 5, no replica under", l)
	}

	h.ForgetReplica("hub-b")
	balanceTickNow(t, h, clk)
	h.mu.Lock()
	l = h.load
	h.mu.Unlock()
	if l != (load{}) {
		t.Errorf("the load with the other replica forgotten: %+v, want nothing to balance", l)
	}
}

// TestEveningOutGoesOnDownToTheShare: a replica that started asking
// agents to move goes on while it holds more than its share and another
// is under, though it is within the slack that would not have started it;
// so the replica that started empty isn't left a slack under the share.
func TestEveningOutGoesOnDownToTheShare(t *testing.T) {
	fc := fakecluster.New(t)
	names := numbered(15)
	clk := clock.NewFake(time.Now())
	h := startHub(t, Config{Agents: testAgents(names...), Replica: "hub-a", Heartbeat: time.Hour, ProbeInterval: time.Hour, Clock: clk})
	for _, n := range names[:14] {
		helloAs(t, h, fc, n, true)
	}
	h.SetPeer("hub-b", false)
	h.SetPeer("hub-c", false) // holds none
	later := clk.Now().Add(time.Minute)
	for _, n := range numbered(11) {
		h.SetClaim("hub-b", "b-"+n, &Claim{Since: later, Upstream: claimUpstream{}})
	}
	// 25 clusters on 3 replicas: a share of 9, a slack of 1.
	balanceTickNow(t, h, clk)
	if n := askedToMove(h); n != 5 {
		t.Fatalf("%d asked to move, want the 5 over the share of 9", n)
	}
	// One more agent here: 10 held of a share of 9 (26 clusters), within
	// the slack, and hub-c still holds none.
	helloAs(t, h, fc, names[14], true)
	balanceTickNow(t, h, clk)
	if n := askedToMove(h); n != 6 {
		t.Errorf("%d asked to move in all, want 6: once started, down to the share", n)
	}
}

// TestAFullReplicaTurnsAMoveAway: a replica at its share while another
// holds fewer answers a moving agent's upgrade 503 with Retry-After 1, so
// the load balancer's next pick can be the other, twice for one cluster
// and then takes it; an agent that isn't moving is never turned away.
func TestAFullReplicaTurnsAMoveAway(t *testing.T) {
	fc := fakecluster.New(t)
	names := []string{"c00", "c01", "c02", "c03", "moving", "new"}
	clk := clock.NewFake(time.Now())
	h := startHub(t, Config{Agents: testAgents(names...), Replica: "hub-a", Heartbeat: time.Hour, ProbeInterval: time.Hour, Clock: clk})
	for _, n := range names[:4] {
		helloAs(t, h, fc, n, false) // agents that can't move, so the tick asks none
	}
	h.SetPeer("hub-b", false)
	balanceTickNow(t, h, clk)

	for i := range declineLimit {
		if code, after := upgrade(t, h.url, "moving", true); code != http.StatusServiceUnavailable || after != "1" {
			t.Fatalf("move %d at a full replica: %d, Retry-After %q; want 503 and 1", i+1, code, after)
		}
	}
	if code, _ := upgrade(t, h.url, "moving", true); code != http.StatusSwitchingProtocols {
		t.Errorf("the move turned away %d times already: %d, want it taken (101)", declineLimit, code)
	}
	if code := upgradeStatus(t, h.url, "new"); code != http.StatusSwitchingProtocols {
		t.Errorf("an agent not moving: %d, want it taken (101)", code)
	}
	if got := testutil.ToFloat64(h.metrics.connects.WithLabelValues("moved_on")); got != declineLimit {
		t.Errorf("moves turned away counted %v, want %d", got, declineLimit)
	}

	// The other replica holds as many: the move is taken at once.
	later := clk.Now().Add(time.Minute)
	for _, n := range []string{"m0", "m1", "m2", "m3"} {
		h.SetClaim("hub-b", n, &Claim{Since: later, Upstream: claimUpstream{}})
	}
	balanceTickNow(t, h, clk)
	if code, _ := upgrade(t, h.url, "c00", true); code != http.StatusSwitchingProtocols {
		t.Errorf("a move with the replicas even: %d, want it taken (101)", code)
	}
}

// closingHello is helloWith for an agent that closes every stream the hub
// opens (the probes'), so that none stays open.
func closingHello(t *testing.T, h *testHub, name string, hello protocol.Message) net.Conn {
	t.Helper()
	sess := agenttest.Raw(t, h.url, name, testToken)
	go func() {
		for {
			st, err := sess.Accept(context.Background())
			if err != nil {
				return
			}
			st.Close()
		}
	}()
	return helloOn(t, sess, hello)
}

// TestAMoveBackToTheSameReplicaIsNoTakeover: an agent asked to move whose
// new connection lands on the replica that asked (the load balancer's
// pick) is that replica's again, its old connection let go without a
// takeover; a connection from another agent process still takes over.
func TestAMoveBackToTheSameReplicaIsNoTakeover(t *testing.T) {
	fc := fakecluster.New(t)
	h := startHub(t, Config{Agents: testAgents("eu-1"), Replica: "hub-a", Heartbeat: time.Hour, ProbeInterval: time.Hour})
	hello := helloFor(fc)
	hello.Moves, hello.Instance, hello.Connection = true, "agent-process-1", 1
	old := closingHello(t, h, "eu-1", hello)
	eventually(t, 5*time.Second, "registered", func() bool { return h.Local("eu-1") != nil })
	first := h.Local("eu-1")
	h.mu.Lock()
	h.agents["eu-1"].moving.Store(true)
	h.mu.Unlock()

	hello.Move, hello.Connection = true, 2
	moved := closingHello(t, h, "eu-1", hello)
	eventually(t, 5*time.Second, "the new connection routed to", func() bool { up := h.Local("eu-1"); return up != nil && up != first })
	if m, err := nextMessage(old); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the connection moved from got %+v, %v; want it closed without a word", m, err)
	} else if m.Type == protocol.TypeGoAway {
		t.Errorf("the connection moved from was told %q", m.Reason)
	}
	if got := testutil.ToFloat64(h.metrics.takeovers); got != 0 {
		t.Errorf("takeovers counted %v, want 0", got)
	}

	other := helloFor(fc)
	other.Moves, other.Instance, other.Connection = true, "agent-process-2", 1
	helloWith(t, h, "eu-1", other)
	if m, err := nextMessage(moved); err != nil || m.Type != protocol.TypeGoAway || m.Reason != protocol.ReasonTakeover {
		t.Errorf("another agent process's connection: the moved one got %+v, %v; want a takeover", m, err)
	}
}
