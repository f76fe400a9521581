package server

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/agent"
	"github.com/tetherhq/tether/internal/testutil/agenttest"
	"github.com/tetherhq/tether/internal/testutil/fakecluster"
	"github.com/tetherhq/tether/internal/testutil/faultproxy"
)

// viaProxy points an agent at the hub through p.
func viaProxy(t *testing.T, p *faultproxy.Proxy) func(*agent.Config) {
	return agenttest.Via(t, p.Addr())
}

// hubProxy starts a fault proxy in front of h's address, closed when the
// test ends.
func hubProxy(t *testing.T, h *testHub) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New(strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func TestSilentDropIsNoticedByBothSides(t *testing.T) {
	fc := fakecluster.New(t)
	h := startHub(t, Config{Agents: testAgents("eu-1"), Heartbeat: time.Second})
	p := hubProxy(t, h)
	a := startAgent(t, h.url, "eu-1", fc, viaProxy(t, p))
	eventually(t, 5*time.Second, "connected", a.Connected)

	p.SetBlackhole(true)
	eventually(t, 6*time.Second, "the agent notices the silence", func() bool {
		return strings.Contains(a.Logs.String(), "Nothing from the hub in 3 s")
	})
	eventually(t, 6*time.Second, "the hub drops its side", func() bool {
		return strings.Contains(h.logs.String(), `The agent of "eu-1" disconnected`) && h.connected("eu-1") == nil
	})
	if !strings.Contains(h.logs.String(), "nothing from the agent in 3 s") {
		t.Errorf("the hub's log doesn't say why:\n%s", h.logs)
	}

	p.SetBlackhole(false)
	eventually(t, 10*time.Second, "the agent is back once the path is", func() bool {
		return a.Connected() && h.connected("eu-1") != nil
	})
}

func TestBackoff(t *testing.T) {
	fc := fakecluster.New(t)
	h := startHub(t, Config{Agents: testAgents("eu-1")})
	p := hubProxy(t, h)
	down := p.Addr()
	p.Close() // nothing listens there now: every connect is refused

	waits := make(chan time.Duration)
	proceed := make(chan struct{})
	a := startAgent(t, "http://"+down, "eu-1", fc, func(c *agent.Config) {
		c.Sleep = func(ctx context.Context, d time.Duration) error {
			select {
			case waits <- d:
			case <-ctx.Done():
				return ctx.Err()
			}
			select {
			case <-proceed:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	})
	next := func() time.Duration {
		t.Helper()
		select {
		case d := <-waits:
			return d
		case <-time.After(5 * time.Second):
			t.Fatalf("the agent asked for no wait; its log:\n%s", a.Logs)
			return 0
		}
	}
	within := func(got time.Duration, wantSeconds float64) {
		t.Helper()
		if s := got.Seconds(); math.Abs(s-wantSeconds) > 0.2*wantSeconds+1e-9 {
			t.Errorf("wait %.2f s, want %.0f s ± 20 %%", s, wantSeconds)
		}
	}
	var seen []time.Duration
	for _, want := range []float64{1, 2, 4, 8, 15, 30, 30} {
		d := next()
		within(d, want)
		seen = append(seen, d)
		proceed <- struct{}{}
	}
	if seen[5] == seen[6] {
		t.Errorf("two waits of exactly %s: no jitter", seen[5])
	}
	if !strings.Contains(a.Logs.String(), "Can't reach the hub at http://"+down+": dial tcp ") ||
		!strings.Contains(a.Logs.String(), fmt.Sprintf("Connecting again in %d s: dial tcp ", int(math.Round(seen[6].Seconds())))) {
		t.Errorf("the agent's log lacks the SPEC's lines:\n%s", a.Logs)
	}

	// The hub comes back at that address while the agent waits: the agent
	// connects, and after the connection breaks it starts again from 1 s.
	within(next(), 30)
	back, err := faultproxy.NewAt(down, strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	proceed <- struct{}{}
	eventually(t, 5*time.Second, "connected", a.Connected)
	back.Reset()
	within(next(), 1)
	proceed <- struct{}{}
	eventually(t, 5*time.Second, "connected again", a.Connected)
}
