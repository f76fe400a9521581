package web

import (
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/clock"
	"github.com/tetherhq/tether/internal/hub"
)

func tlReady(name string) hub.ClusterStatus { return hub.ClusterStatus{Name: name, Status: hub.Ready} }
func tlDown(name, why string) hub.ClusterStatus {
	return hub.ClusterStatus{Name: name, Status: hub.Unreachable, Message: why}
}

// TestTimelineTransitions: a change of status or of its reason is a new
// span; the same status again is not.
func TestTimelineTransitions(t *testing.T) {
	start := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	c := clock.NewFake(start)
	tl := newTimelines(c)
	if got := tl.get("shop"); got != nil {
		t.Fatalf("a cluster never seen: %+v, want none", got)
	}
	tl.observe(tlDown("shop", "Its agent isn't connected."))
	c.Step(time.Minute)
	tl.observe(tlReady("shop"))
	c.Step(time.Minute)
	tl.observe(tlReady("shop"))
	tl.observe(tlDown("shop", "probe timed out"))
	c.Step(time.Minute)
	tl.observe(tlDown("shop", "connection refused"))
	got := tl.get("shop")
	want := []TimelineChange{
		{Time: start, Reason: "Its agent isn't connected."},
		{Time: start.Add(time.Minute), Ready: true},
		{Time: start.Add(2 * time.Minute), Reason: "probe timed out"},
		{Time: start.Add(3 * time.Minute), Reason: "connection refused"},
	}
	if len(got.Changes) != len(want) {
		t.Fatalf("changes: %+v, want %+v", got.Changes, want)
	}
	for i := range want {
		if got.Changes[i] != want[i] {
			t.Errorf("change %d: %+v, want %+v", i, got.Changes[i], want[i])
		}
	}
	if !got.Since.Equal(start) || !got.Now.Equal(start.Add(3*time.Minute)) {
		t.Errorf("since %v, now %v: want %v and 3 min later", got.Since, got.Now, start)
	}
	tl.forget([]string{"shop"})
	if got := tl.get("shop"); got != nil {
		t.Errorf("a cluster forgotten: %+v, want none", got)
	}
}

// TestTimelineWindow: past 24 h, changes go, and the one in force at the
// window's start is kept, clipped to it.
func TestTimelineWindow(t *testing.T) {
	start := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	c := clock.NewFake(start)
	tl := newTimelines(c)
	tl.observe(tlReady("shop"))
	c.Step(time.Hour)
	tl.observe(tlDown("shop", "gone"))
	c.Step(time.Hour)
	tl.observe(tlReady("shop"))
	c.Step(23 * time.Hour) // the first change is 25 h old, the second 24 h
	got := tl.get("shop")
	from := c.Now().UTC().Add(-TimelineWindow)
	if len(got.Changes) != 2 {
		t.Fatalf("changes: %+v, want the last two", got.Changes)
	}
	if !got.Changes[0].Time.Equal(from) || got.Changes[0].Ready || got.Changes[0].Reason != "gone" {
		t.Errorf("first change %+v, want Unreachable (gone) from %v", got.Changes[0], from)
	}
	if !got.Since.Equal(from) {
		t.Errorf("since %v, want %v", got.Since, from)
	}
	c.Step(48 * time.Hour)
	got = tl.get("shop")
	if len(got.Changes) != 1 || !got.Changes[0].Ready || !got.Since.Equal(c.Now().UTC().Add(-TimelineWindow)) {
		t.Errorf("two days on: %+v, want Ready over the whole window", got)
	}
}

// TestTimelineBounded: a cluster that flaps keeps its latest changes, and
// says it knows nothing before them.
func TestTimelineBounded(t *testing.T) {
	start := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	c := clock.NewFake(start)
	tl := newTimelines(c)
	for i := range 3 * maxTimelineChanges {
		c.Step(10 * time.Second)
		if i%2 == 0 {
			tl.observe(tlReady("shop"))
		} else {
			tl.observe(tlDown("shop", "flap"))
		}
	}
	got := tl.get("shop")
	if len(got.Changes) != maxTimelineChanges {
		t.Fatalf("%d changes kept, want %d", len(got.Changes), maxTimelineChanges)
	}
	if !got.Since.Equal(got.Changes[0].Time) || !got.Changes[len(got.Changes)-1].Time.Equal(c.Now().UTC()) {
		t.Errorf("since %v, first %v, last %v: want since the first kept, the last now", got.Since, got.Changes[0].Time, got.Changes[len(got.Changes)-1].Time)
	}
}
