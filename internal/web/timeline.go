package web

import (
	"context"
	"sync"
	"time"

	"github.com/tetherhq/tether/internal/clock"
	"github.com/tetherhq/tether/internal/hub"
)

// TimelineWindow is how far back a cluster's timeline goes.
const TimelineWindow = 24 * time.Hour

// maxTimelineChanges bounds one cluster's timeline: a cluster that flaps
// every 10 s probe for a day keeps its latest changes only, and the
// timeline says "No record" before them.
const maxTimelineChanges = 500

// TimelineChange is a change of a cluster's status, as its timeline shows
// it: from Time on, the cluster was Ready, or not, and why.
type TimelineChange struct {
	Time   time.Time `json:"time"`
	Ready  bool      `json:"ready"`
	Reason string    `json:"reason,omitempty"`
}

// TimelineJSON is a cluster's status over the last TimelineWindow, in
// /api/clusters and /api/clusters/<name>. The hub keeps it in memory from
// the status changes it sees, its own clusters' and, through its peers,
// other replicas': before Since (when this hub started, or the oldest
// change kept) it knows nothing, which the page shows as "No record".
type TimelineJSON struct {
	Since   time.Time        `json:"since"`
	Now     time.Time        `json:"now"`
	Changes []TimelineChange `json:"changes"` // oldest first
}

// timelines keeps each cluster's recent changes of status.
type timelines struct {
	clock clock.Clock
	start time.Time // when this hub began to record

	mu sync.Mutex
	of map[string]*timeline
}

type timeline struct {
	since   time.Time
	changes []TimelineChange // oldest first
}

func newTimelines(c clock.Clock) *timelines {
	return &timelines{clock: c, start: c.Now().UTC(), of: map[string]*timeline{}}
}

// observe records st if it differs from the cluster's last status.
func (t *timelines) observe(st hub.ClusterStatus) {
	now := t.clock.Now().UTC().Truncate(time.Second)
	c := TimelineChange{Time: now, Ready: st.Status == hub.Ready}
	if !c.Ready {
		c.Reason = st.Message
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	tl := t.of[st.Name]
	if tl == nil {
		tl = &timeline{since: now}
		t.of[st.Name] = tl
	}
	if n := len(tl.changes); n > 0 && tl.changes[n-1].Ready == c.Ready && tl.changes[n-1].Reason == c.Reason {
		return
	}
	tl.changes = append(tl.changes, c)
	t.trim(tl, now)
}

// trim drops what is past the window, or past the bound: the change in
// force at the window's start is kept, clipped to it.
func (t *timelines) trim(tl *timeline, now time.Time) {
	from := now.Add(-TimelineWindow)
	i := 0
	for i+1 < len(tl.changes) && !tl.changes[i+1].Time.After(from) {
		i++
	}
	if over := len(tl.changes) - i - maxTimelineChanges; over > 0 {
		i += over
	}
	if i > 0 {
		tl.changes = append([]TimelineChange(nil), tl.changes[i:]...)
		tl.since = tl.changes[0].Time
	}
	if len(tl.changes) > 0 && tl.changes[0].Time.Before(from) {
		tl.changes[0].Time = from
	}
	if tl.since.Before(from) {
		tl.since = from
	}
}

// get returns cluster name's timeline, nil when none was recorded.
func (t *timelines) get(name string) *TimelineJSON {
	now := t.clock.Now().UTC().Truncate(time.Second)
	t.mu.Lock()
	defer t.mu.Unlock()
	tl := t.of[name]
	if tl == nil {
		return nil
	}
	t.trim(tl, now)
	return &TimelineJSON{Since: tl.since, Now: now, Changes: append([]TimelineChange(nil), tl.changes...)}
}

// forget drops the clusters the agents list removed.
func (t *timelines) forget(names []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, n := range names {
		delete(t.of, n)
	}
}

// RecordTimelines records every status change of the clusters this hub
// sees, its own and other replicas', until ctx is done: the clusters'
// timelines. The hub runs it for its life.
func (wb *Web) RecordTimelines(ctx context.Context) {
	sub := wb.cfg.Clusters.Subscribe()
	defer sub.Close()
	for _, st := range wb.cfg.Clusters.Clusters() {
		wb.timelines.observe(st)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-sub.Wake():
		}
		names, all := sub.Take()
		if all {
			for _, st := range wb.cfg.Clusters.Clusters() {
				wb.timelines.observe(st)
			}
			continue
		}
		for _, name := range names {
			if st, ok := wb.cfg.Clusters.Cluster(name); ok {
				wb.timelines.observe(st)
			}
		}
	}
}
