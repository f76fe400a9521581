package hub

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/clock"
	"github.com/tetherhq/tether/internal/protocol"
	"github.com/tetherhq/tether/internal/testutil/syncbuf"
)

func TestAdmissionPace(t *testing.T) {
	for _, tc := range []struct {
		listed, rate int
	}{
		{0, MinAdmitRate},
		{500, MinAdmitRate},
		{2000, MinAdmitRate},
		{10000, 500},
		{100000, 5000},
	} {
		if got := admitRate(tc.listed); got != tc.rate {
			t.Errorf("admitRate(%d) = %d, want %d", tc.listed, got, tc.rate)
		}
	}
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

	// Agents still on their way count: three admitted and not yet
	// welcomed fill a pace of three.
	var a admission
	admits := func(a *admission, now time.Time, rate int) bool {
		ok, _ := a.admit(now, rate)
		return ok
	}
	for i := range 3 {
		if !admits(&a, at(i), 3) {
			t.Fatalf("agent %d of 3 was held back", i+1)
		}
	}
	if admits(&a, at(500), 3) {
		t.Error("a fourth agent was admitted while three were on their way")
	}
	// One that is not welcomed gives its place back at once.
	a.giveBack()
	if !admits(&a, at(500), 3) {
		t.Error("a place given back was not taken again")
	}
	// Welcomed agents count for a second from their welcome.
	for i := range 3 {
		a.welcomed(at(900 + i))
	}
	if admits(&a, at(1500), 3) {
		t.Error("an agent was admitted within a second of three welcomes, across a clock second")
	}
	if !admits(&a, at(1903), 3) {
		t.Error("a second after the welcomes, the pace admits again")
	}

	// A flood of bad handshakes holds no place once it is over.
	var b admission
	for range 10 {
		if !admits(&b, at(0), 3) {
			t.Fatal("held back, with nobody on the way")
		}
		b.giveBack()
	}
}

// TestHeldBackAgentsComeBackInOrder: each agent held back is told to come
// back a pace's share of a second after the one before it, never later
// than maxHoldBack, and a queue that has gone by starts again from now.
func TestHeldBackAgentsComeBackInOrder(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var a admission
	for range 3 {
		if ok, _ := a.admit(t0, 3); !ok {
			t.Fatal("held back, with nobody on the way")
		}
	}
	for k := 1; k <= 7; k++ {
		ok, wait := a.admit(t0, 3)
		if want := time.Duration(k) * (time.Second / 3); ok || wait != want {
			t.Fatalf("agent %d held back: admitted %v, told to wait %s, want %s", k, ok, wait, want)
		}
	}
	// Many more, or one agent asking again and again: none waits past
	// the time the pace takes the whole list in.
	for range 1000 {
		if _, wait := a.admit(t0.Add(time.Second/2), 3); wait > maxHoldBack {
			t.Fatalf("told to wait %s, more than %s", wait, maxHoldBack)
		}
	}
	// Once the queue's last turn has passed, the next held back is the
	// first again.
	later := t0.Add(time.Minute)
	for range 3 {
		a.welcomed(later)
	}
	if ok, wait := a.admit(later, 3); ok || wait != time.Second/3 {
		t.Fatalf("after the queue went by: admitted %v, told to wait %s, want %s", ok, wait, time.Second/3)
	}
}

// TestAWaveComesBackAtThePace plays a wave of agents against the
// admission on a simulated clock: 2,000 agents arrive within a second,
// each held back comes back when its Retry-After (whole seconds, as
// agentsHandler sends it) says, and each admitted is welcomed 20 ms
// later. On one hub, at a pace of 100 a second, they are all in within
// the 20 s the pace takes them in, plus a second or two for the
// rounding; on two replicas taking a killed one's agents, each agent
// trying the other replica next, within half that. No second welcomes
// more than a replica's pace. (Told a random second of a 10 s spread, as
// before, the last came after 28 s on one hub and 20.5 s on two.)
func TestAWaveComesBackAtThePace(t *testing.T) {
	for _, replicas := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d replicas", replicas), func(t *testing.T) {
			waveComesBack(t, replicas)
		})
	}
}

func waveComesBack(t *testing.T, replicas int) {
	const agents, rate = 2000, 100
	const welcomeAfter = 20 // ms
	type arrival struct{ agent, replica int }
	as := make([]admission, replicas)
	t0 := time.Unix(1000, 0)
	arrivals := map[int][]arrival{} // ms → agents arriving then
	for i := range agents {
		ms := i * 1000 / agents
		arrivals[ms] = append(arrivals[ms], arrival{i, i % replicas})
	}
	welcomes := map[int][]int{}                // ms → the replicas welcoming an agent then
	perSecond := make([]map[int]int, replicas) // per replica, second → welcomes
	for r := range perSecond {
		perSecond[r] = map[int]int{}
	}
	in, last, heldBack := 0, 0, 0
	for ms := 0; in < agents; ms++ {
		if ms > 120_000 {
			t.Fatalf("after 2 minutes, %d of %d agents are in", in, agents)
		}
		now := t0.Add(time.Duration(ms) * time.Millisecond)
		for _, r := range welcomes[ms] {
			as[r].welcomed(now)
			in++
			last = ms
			perSecond[r][ms/1000]++
		}
		for _, a := range arrivals[ms] {
			ok, wait := as[a.replica].admit(now, rate)
			if ok {
				welcomes[ms+welcomeAfter] = append(welcomes[ms+welcomeAfter], a.replica)
				continue
			}
			heldBack++
			secs := int((wait + time.Second - 1) / time.Second)
			back := ms + secs*1000
			arrivals[back] = append(arrivals[back], arrival{a.agent, (a.replica + 1) % replicas})
		}
	}
	t.Logf("%d agents in after %.1f s, %d times held back", agents, float64(last)/1000, heldBack)
	if limit := (agents/(rate*replicas) + 2) * 1000; last > limit {
		t.Errorf("the last agent was welcomed after %.1f s, more than %.1f s", float64(last)/1000, float64(limit)/1000)
	}
	for r := range perSecond {
		for s, n := range perSecond[r] {
			if n > rate {
				t.Errorf("replica %d welcomed %d agents in second %d, more than the pace of %d", r, n, s, rate)
			}
		}
	}
}

// TestReplicasShareTheFleetsPace: each of N replicas admits its share of
// the fleet's pace, so those left after one is killed take its agents
// back at the fleet's pace together.
func TestReplicasShareTheFleetsPace(t *testing.T) {
	var names []string
	for i := range 6000 {
		names = append(names, fmt.Sprintf("c-%d", i))
	}
	h := startHub(t, Config{Agents: testAgents(names...)})
	for _, tc := range []struct{ replicas, want int }{{0, 300}, {1, 300}, {2, 150}, {3, MinAdmitRate}} {
		h.SetReplicas(tc.replicas)
		if got := h.admitRate(); got != tc.want {
			t.Errorf("with %d replicas: %d agents a second, want %d", tc.replicas, got, tc.want)
		}
	}
}

// TestRetryAfterIsTheAgentsTurn: past the pace, the hub answers 503 with
// the agent's turn in whole seconds, rounded up: a pace's worth of agents
// told 1, the next 2, and so on.
func TestRetryAfterIsTheAgentsTurn(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	h, err := New(Config{Agents: testAgents("eu-1"), Logger: slogTo(&syncbuf.Buffer{}), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	rate := h.admitRate()
	for range rate { // on their way: the pace is full
		if ok, _ := h.admission.admit(clk.Now(), rate); !ok {
			t.Fatal("held back, with nobody on the way")
		}
	}
	for k := 1; k <= 2*rate; k++ {
		r := httptest.NewRequest("GET", "/api/agent", nil)
		r.Header.Set(protocol.AgentHeader, "eu-1")
		r.Header.Set("Authorization", "Bearer "+testToken)
		w := httptest.NewRecorder()
		h.serveAgent(w, r, false)
		want := "1"
		if k > rate {
			want = "2"
		}
		if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != want {
			t.Fatalf("agent %d held back: %d, Retry-After %q; want 503, %q", k, w.Code, w.Header().Get("Retry-After"), want)
		}
	}
}
