package hub

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/clock"
	"github.com/tetherhq/tether/internal/protocol"
	"github.com/tetherhq/tether/internal/testutil/agenttest"
	"github.com/tetherhq/tether/internal/testutil/fakecluster"
)

// TestGoodbyesWaitTogether: a stopping hub waits once, for all its agents
// together, for each to close after its goaway, and then closes those that
// haven't. 70 agents that never close (their network gone silent; more
// than goAwayWorkers) are let go one goAwayLinger of the hub's clock after
// the goaways went, where each batch of 64 used to wait its own 2 s: with
// thousands, longer than a pod's grace.
func TestGoodbyesWaitTogether(t *testing.T) {
	fc := fakecluster.New(t)
	clk := clock.NewFake(time.Now())
	names := make([]string, goAwayWorkers+6)
	for i := range names {
		names[i] = fmt.Sprintf("eu-%d", i)
	}
	h := startHub(t, Config{Agents: testAgents(names...), Heartbeat: time.Hour, ProbeInterval: time.Hour, Clock: clk})
	for _, name := range names {
		sess := agenttest.Raw(t, h.url, name, testToken)
		ctl, err := sess.Open(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if err := protocol.Write(ctl, helloFor(fc)); err != nil {
			t.Fatal(err)
		}
		if m, err := protocol.Read(ctl); err != nil || m.Type != protocol.TypeWelcome {
			t.Fatalf("%s: answered %v, %v; want a welcome", name, m.Type, err)
		}
		// From here on it reads nothing and never closes.
	}
	// Each agent's heartbeat and first probe planned, and nothing else.
	before := 2 * len(names)
	eventually(t, 10*time.Second, "every agent's timers planned", func() bool { return clk.Timers() == before })
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		h.Close()
	}()
	eventually(t, 10*time.Second, "every goaway sent, and one wait for them all", func() bool { return clk.Timers() == before+1 })
	select {
	case <-closed:
		t.Fatal("Close returned before the agents had their linger")
	default:
	}
	clk.Step(goAwayLinger)
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatalf("Close still waits for silent agents a linger of the hub's clock after the goaways\n%s", h.logs)
	}
	if n := len(h.agents); n != 0 {
		t.Errorf("%d agents still connected after Close", n)
	}
}
