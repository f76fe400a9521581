package clock

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestFakeRunsWhatIsDue: Step starts exactly the timers due by the new
// time, each once, and their functions may use the clock.
func TestFakeRunsWhatIsDue(t *testing.T) {
	start := time.Unix(1_000_000, 0)
	c := NewFake(start)
	ran := make(chan string, 4)
	var again Timer
	again = c.AfterFunc(2*time.Second, func() {
		ran <- "again at " + c.Now().Sub(start).String()
		again.Reset(2 * time.Second) // from inside its own call, as the hub's loops do
	})
	c.AfterFunc(3*time.Second, func() { ran <- "once" })
	stopped := c.AfterFunc(time.Second, func() { ran <- "stopped" })
	if !stopped.Stop() || stopped.Stop() {
		t.Fatal("Stop: want true once, then false")
	}
	if d, ok := c.Next(); !ok || d != 2*time.Second {
		t.Fatalf("Next = %s, %v; want 2s", d, ok)
	}

	c.Step(time.Second)
	if c.Timers() != 2 {
		t.Fatalf("%d timers after 1 s, want 2", c.Timers())
	}
	c.Step(time.Second)
	if got := <-ran; got != "again at 2s" {
		t.Fatalf("ran %q", got)
	}
	waitTimers(t, c, 2) // the reset is back
	c.Step(2 * time.Second)
	got := map[string]bool{<-ran: true, <-ran: true}
	if !got["once"] || !got["again at 4s"] {
		t.Fatalf("ran %v at 4 s", got)
	}
	waitTimers(t, c, 1)
	select {
	case r := <-ran:
		t.Fatalf("ran %q, more than was due", r)
	default:
	}
	again.Stop()
}

func waitTimers(t *testing.T, c *Fake, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for c.Timers() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d timers, want %d", c.Timers(), n)
		}
		time.Sleep(time.Millisecond)
	}
}
