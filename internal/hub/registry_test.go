package hub

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/agent"
	"github.com/tetherhq/tether/internal/clock"
	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/listfile"
	"github.com/tetherhq/tether/internal/protocol"
	"github.com/tetherhq/tether/internal/testutil/agenttest"
	"github.com/tetherhq/tether/internal/testutil/fakecluster"
)

// TestALateNotConnectedLeavesTheNewAgentsStatus: an agent's finish records
// "not connected" after it let go of the hub's lock, so an agent that took
// over meanwhile may have been probed already. That late record must not
// stand over the connected agent's status until its next probe.
func TestALateNotConnectedLeavesTheNewAgentsStatus(t *testing.T) {
	fc := fakecluster.New(t)
	h := startHub(t, Config{Agents: testAgents("eu-1"), ProbeInterval: time.Hour})
	a := startAgent(t, h.url, "eu-1", fc)
	eventually(t, 5*time.Second, "connected", a.Connected)
	eventually(t, 5*time.Second, "the cluster is Ready", func() bool { return statusOf(h, "eu-1") == "Ready" })
	h.setStatus("eu-1", "test", notConnected(time.Now())) // as the finish of an agent taken over
	if got := statusOf(h, "eu-1"); got != "Ready" {
		t.Errorf("with an agent connected, a late not connected made the status %q", got)
	}
}

// TestRefusedAtRegistrationKeepsNoCA: an agent whose hello comes after a
// reload removed its name is refused as it registers; the CA its hello
// carried must not stay in the hub's records of a cluster no longer
// listed (listed again, a cluster starts afresh, without a warning that
// its CA changed).
func TestRefusedAtRegistrationKeepsNoCA(t *testing.T) {
	fc := fakecluster.New(t)
	list := testAgents("eu-1", "us-1")
	h := startHub(t, Config{Agents: list, ProbeInterval: time.Hour})
	sess := rawAgent(t, h) // its upgrade checked against the list with eu-1
	ctl, err := sess.Open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	h.AgentsChanged(list.Replace([]fleet.Agent{{Name: "us-1", TokenHashes: []listfile.Hash{listfile.HashToken(testToken)}}}))
	if err := protocol.Write(ctl, helloFor(fc)); err != nil {
		t.Fatal(err)
	}
	if m, err := protocol.Read(ctl); err != nil || m.Type != protocol.TypeRefused || m.Status != http.StatusUnauthorized {
		t.Fatalf("the hello was answered %+v, %v; want a refusal, 401", m, err)
	}
	h.mu.Lock()
	_, ca := h.lastCA["eu-1"]
	_, status := h.status["eu-1"]
	h.mu.Unlock()
	if ca || status {
		t.Errorf("after refusing an agent of a cluster no longer listed, the hub keeps its CA (%v) or status (%v)", ca, status)
	}
}

func TestRemovedAgentIsDisconnectedAndRefused(t *testing.T) {
	fc := fakecluster.New(t)
	list := testAgents("eu-1", "us-1")
	h := startHub(t, Config{Agents: list})
	a := startAgent(t, h.url, "eu-1", fc)
	eventually(t, 5*time.Second, "connected", a.Connected)

	h.AgentsChanged(list.Replace([]fleet.Agent{{Name: "us-1", TokenHashes: []listfile.Hash{listfile.HashToken(testToken)}}}))
	err := a.Wait(t, 5*time.Second)
	if err == nil || !strings.Contains(err.Error(), "it doesn't know this name and token.") {
		t.Fatalf("Run = %v, want a refusal once the list dropped the agent", err)
	}
	if !strings.Contains(h.logs.String(), `The agents list changed: disconnecting an agent agent="eu-1"`) {
		t.Errorf("hub log:\n%s", h.logs)
	}
	eventually(t, 5*time.Second, "the removed cluster is forgotten", func() bool {
		_, ok := h.Cluster("eu-1")
		return !ok
	})
	// Its status records go too: listed again, it starts afresh.
	eventually(t, 5*time.Second, "the removed cluster's status history is dropped", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		_, status := h.status["eu-1"]
		_, ca := h.lastCA["eu-1"]
		return !status && !ca
	})
	h.AgentsChanged(list.Replace([]fleet.Agent{{Name: "eu-1", TokenHashes: []listfile.Hash{listfile.HashToken(testToken)}}, {Name: "us-1", TokenHashes: []listfile.Hash{listfile.HashToken(testToken)}}}))
	if hist := h.History("eu-1"); len(hist) != 0 {
		t.Errorf("listed again, eu-1 has the history of before: %v", hist)
	}
}

// TestProbeCutShortByADisconnectIsNotAStatus: a probe in flight when the
// agent's connection breaks fails because the tunnel ended, not because of
// the API server. The cluster's status and history say only that its agent
// isn't connected, and the log blames no API server. The probe here is run
// with a context that never ends, as the connection's may not have ended
// yet when the probe sees the tunnel go.
func TestProbeCutShortByADisconnectIsNotAStatus(t *testing.T) {
	fc := fakecluster.New(t)
	fc.ReadyzDelay.Store(int64(time.Hour)) // every probe waits on /readyz
	h := startHub(t, Config{Agents: testAgents("eu-1"), ProbeTimeout: time.Minute})
	p := hubProxy(t, h)
	a := startAgent(t, h.url, "eu-1", fc, agenttest.Via(t, p.Addr()))
	eventually(t, 5*time.Second, "connected", a.Connected)
	c := h.connected("eu-1")
	probed := make(chan bool)
	go func() { probed <- h.probeAndRecord(context.Background(), c) }()
	eventually(t, 5*time.Second, "two probes wait on /readyz", func() bool { return fc.Count("/readyz") >= 2 })

	p.Reset() // the connection breaks: the hub reads its end, no goodbye
	if <-probed {
		t.Error("the probe reports the connection up after it broke")
	}
	eventually(t, 5*time.Second, "the hub sees the agent go", func() bool {
		return strings.Contains(h.logs.String(), `The agent of "eu-1" disconnected`)
	})
	for _, ch := range h.History("eu-1") {
		if ch.Status != "Unreachable: "+MessageNotConnected {
			t.Errorf("status history %v: the probe the disconnect cut short is in it", h.History("eu-1"))
			break
		}
	}
	if strings.Contains(h.logs.String(), "can't be reached") {
		t.Errorf("the hub blamed the API server for a probe the disconnect cut short:\n%s", h.logs)
	}
}

func TestAgentDyingWithDialsPending(t *testing.T) {
	fc := fakecluster.New(t)
	h := startHub(t, Config{Agents: testAgents("eu-1"), Heartbeat: 200 * time.Millisecond, ProbeInterval: time.Hour, IdleTimeout: 200 * time.Millisecond})
	p := hubProxy(t, h)
	dialing := make(chan struct{}, 100)
	a := startAgent(t, h.url, "eu-1", fc, agenttest.Via(t, p.Addr()), func(c *agent.Config) {
		// An API server that never answers a dial.
		c.DialAPIServer = func(ctx context.Context, _, _ string) (net.Conn, error) {
			dialing <- struct{}{}
			<-ctx.Done()
			return nil, ctx.Err()
		}
	})
	eventually(t, 5*time.Second, "connected", a.Connected)
	c := h.connected("eu-1")
	base := measure()

	const n = 50
	errs := make(chan error, n)
	for range n {
		go func() {
			st, err := c.dial(context.Background())
			if err == nil {
				st.Close()
				err = errors.New("a dial succeeded")
			}
			errs <- err
		}()
	}
	for range n {
		select {
		case <-dialing:
		case <-time.After(10 * time.Second):
			t.Fatal("the agent did not start every dial")
		}
	}
	// The agent dies: its connection vanishes, and it never comes back.
	deadAt := time.Now()
	p.Reset()
	a.Cancel()
	for range n {
		select {
		case err := <-errs:
			if err == nil {
				t.Error("a pending dial succeeded")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a pending dial hangs after its agent died")
		}
	}
	t.Logf("%d pending dials failed within %s of the agent dying", n, time.Since(deadAt).Round(time.Millisecond))
	a.Wait(t, 10*time.Second)
	eventually(t, 10*time.Second, "the hub drops the dead agent", func() bool { return h.connected("eu-1") == nil })
	// The agent is gone, so its goroutines are too: back below the baseline
	// taken while it was connected.
	settles(t, h, base, 30*time.Second)
}

// TestWelcomedOnceRegistered: by the time an agent reads its welcome, the
// hub already routes requests to it, so a request made as soon as the agent
// says it is connected is not answered 503.
func TestWelcomedOnceRegistered(t *testing.T) {
	fc := fakecluster.New(t)
	h := startHub(t, Config{Agents: testAgents("eu-1"), ProbeInterval: time.Hour})
	for i := range 20 {
		sess := rawAgent(t, h)
		ctl, err := sess.Open(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if err := protocol.Write(ctl, helloFor(fc)); err != nil {
			t.Fatal(err)
		}
		m, err := protocol.Read(ctl)
		if err != nil || m.Type != protocol.TypeWelcome {
			t.Fatalf("connection %d: answered %v, %v; want a welcome\n%s", i, m.Type, err, h.logs)
		}
		if c := h.connected("eu-1"); c == nil || c.remote != sess.LocalAddr().String() {
			t.Fatalf("connection %d: welcomed before the hub routes to it", i)
		}
		sess.Close()
	}
}

// TestProbesStartEveryInterval: SPEC section 2 probes every 10 s, so a slow
// API server is probed as often as a quick one: a probe starts every
// ProbeInterval, not ProbeInterval after the last one ended, and never
// sooner. The hub's clock is the test's: each probe's /readyz is held while
// the clock moves on, then let go.
func TestProbesStartEveryInterval(t *testing.T) {
	const interval = 10 * time.Second
	fc := fakecluster.New(t)
	gate := make(chan struct{})
	fc.ReadyzGate.Store(&gate)
	clk := clock.NewFake(time.Now())
	h := startHub(t, Config{Agents: testAgents("eu-1"), ProbeInterval: interval, Heartbeat: time.Hour, Clock: clk})
	a := startAgent(t, h.url, "eu-1", fc)
	eventually(t, 5*time.Second, "connected", a.Connected)
	// Its heartbeat's timer and its probes' (due now).
	eventually(t, 5*time.Second, "the first probe planned", func() bool { d, ok := clk.Next(); return ok && d == 0 && clk.Timers() == 2 })
	clk.Step(0)
	for i, took := range []time.Duration{interval * 4 / 5, 0, interval / 2, interval * 4 / 5} {
		eventually(t, 5*time.Second, fmt.Sprintf("probe %d at /readyz", i+1), func() bool { return fc.Count("/readyz") == i+1 })
		clk.Step(took)
		gate <- struct{}{}
		eventually(t, 5*time.Second, fmt.Sprintf("probe %d done and the next planned", i+1), func() bool { return clk.Timers() == 2 })
		if next, _ := clk.Next(); next != interval-took {
			t.Fatalf("probe %d took %s; the next is planned %s after its end, want %s: one per interval from its start", i+1, took, next, interval-took)
		}
		if i == 0 && statusOf(h, "eu-1") != Ready {
			t.Fatalf("after the first probe: %q", statusOf(h, "eu-1"))
		}
		clk.Step(interval - took)
	}
}
