package hub

import (
	"fmt"
	"testing"
	"time"
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
	for i := range 3 {
		if !a.admit(at(i), 3) {
			t.Fatalf("agent %d of 3 was held back", i+1)
		}
	}
	if a.admit(at(500), 3) {
		t.Error("a fourth agent was admitted while three were on their way")
	}
	// One that is not welcomed gives its place back at once.
	a.giveBack()
	if !a.admit(at(500), 3) {
		t.Error("a place given back was not taken again")
	}
	// Welcomed agents count for a second from their welcome.
	for i := range 3 {
		a.welcomed(at(900 + i))
	}
	if a.admit(at(1500), 3) {
		t.Error("an agent was admitted within a second of three welcomes, across a clock second")
	}
	if !a.admit(at(1903), 3) {
		t.Error("a second after the welcomes, the pace admits again")
	}

	// A flood of bad handshakes holds no place once it is over.
	var b admission
	for range 10 {
		if !b.admit(at(0), 3) {
			t.Fatal("held back, with nobody on the way")
		}
		b.giveBack()
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
