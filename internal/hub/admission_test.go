package hub

import (
	"testing"
	"time"
)

func TestAdmissionPace(t *testing.T) {
	for _, tc := range []struct {
		listed, rate int
	}{
		{0, minAdmitRate},
		{500, minAdmitRate},
		{2000, minAdmitRate},
		{10000, 500},
		{100000, 5000},
	} {
		if got := admitRate(tc.listed); got != tc.rate {
			t.Errorf("admitRate(%d) = %d, want %d", tc.listed, got, tc.rate)
		}
	}
	var a admission
	t0 := time.Unix(1000, 0)
	for i := range 3 {
		if !a.allow(t0.Add(time.Duration(i)*time.Millisecond), 3) {
			t.Fatalf("agent %d of 3 in one second was held back", i+1)
		}
		a.welcomed(t0.Add(time.Duration(i) * time.Millisecond))
	}
	if a.allow(t0.Add(999*time.Millisecond), 3) {
		t.Error("a fourth agent in the same second was admitted")
	}
	if !a.allow(t0.Add(time.Second), 3) {
		t.Error("the next second admits again")
	}
	// Any second, not only a clock second: three welcomed late in one
	// second leave no place early in the next.
	var late admission
	for i := range 3 {
		late.welcomed(t0.Add(time.Duration(900+i) * time.Millisecond))
	}
	if late.allow(t0.Add(1500*time.Millisecond), 3) {
		t.Error("a fourth agent within a second of three was admitted across a clock second")
	}
	if !late.allow(t0.Add(1903*time.Millisecond), 3) {
		t.Error("a second after the three, the pace admits again")
	}
	// Connections that are never welcomed take no place.
	var b admission
	for i := range 10 {
		if !b.allow(t0.Add(time.Duration(i)*time.Millisecond), 3) {
			t.Fatalf("connection %d was held back, and none was welcomed", i+1)
		}
	}
}
