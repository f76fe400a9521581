package peers

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/hub"
	"github.com/tetherhq/tether/internal/testutil/agenttest"
	"github.com/tetherhq/tether/internal/web"
)

// TestTimelinesAgreeAcrossReplicas: the replica that doesn't hold a
// cluster's agent records its changes of status as its peer's claims tell
// them, so both replicas' timelines end alike, within the status lag.
func TestTimelinesAgreeAcrossReplicas(t *testing.T) {
	rs := startWebReplicas(t, webOptions{agents: []fleet.Agent{agentEntry("eu-1")}}, "hub-a", "hub-b")
	a, b := rs[0], rs[1]
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, r := range rs {
		wg.Go(func() { r.web.RecordTimelines(ctx) })
	}
	t.Cleanup(func() { stop(); wg.Wait() })
	timeline := func(r *webReplica) []web.TimelineChange {
		t.Helper()
		code, body, _ := ask(t, r.public+"/api/clusters/eu-1", "alice", "dev", nil)
		if code != http.StatusOK {
			t.Fatalf("/api/clusters/eu-1 on %s: %d %s", r.name, code, body)
		}
		var c web.ClusterJSON
		if err := json.Unmarshal([]byte(body), &c); err != nil || c.Timeline == nil {
			t.Fatalf("/api/clusters/eu-1 on %s: %v, %s", r.name, err, body)
		}
		return c.Timeline.Changes
	}
	last := func(r *webReplica) web.TimelineChange {
		ch := timeline(r)
		return ch[len(ch)-1]
	}
	fc := reviewingCluster(t, func(string, string, string) bool { return true })
	ag := agenttest.Start(t, a.url, "eu-1", testToken, fc.SADir, fc.Addr())
	for _, r := range rs {
		eventually(t, 5*time.Second, r.name+"'s timeline ends Ready", func() bool { return last(r).Ready })
	}
	ag.Stop(t)
	for _, r := range rs {
		eventually(t, 5*time.Second, r.name+"'s timeline ends Unreachable", func() bool {
			l := last(r)
			return !l.Ready && l.Reason == hub.MessageNotConnected
		})
	}
	ta, tb := timeline(a), timeline(b)
	for i, pair := range [][2]web.TimelineChange{{ta[len(ta)-2], tb[len(tb)-2]}, {ta[len(ta)-1], tb[len(tb)-1]}} {
		if pair[0].Ready != pair[1].Ready || pair[0].Reason != pair[1].Reason {
			t.Errorf("change %d from the end: hub-a %+v, hub-b %+v", 2-i, pair[0], pair[1])
		}
		if d := pair[1].Time.Sub(pair[0].Time).Abs(); d > 3*time.Second {
			t.Errorf("change %d from the end: hub-a at %v, hub-b at %v, %v apart", 2-i, pair[0].Time, pair[1].Time, d)
		}
	}
}

// TestFleetResourcesStreamAcrossReplicas: asked for NDJSON, /api/resources
// on either replica gives the clusters of both, each object a line and
// each cluster an end line, in the order of their names.
func TestFleetResourcesStreamAcrossReplicas(t *testing.T) {
	a, b, _ := twoReplicas(t, webOptions{})
	want := "eu-1/web eu-1:end eu-2/cache eu-2:end us-1/api us-1:end"
	for _, r := range []*webReplica{a, b} {
		code, body, left := ask(t, r.public+"/api/resources?kind=pods", "alice", "dev", http.Header{"Accept": {"application/x-ndjson"}})
		var got []string
		for line := range strings.Lines(body) {
			var l struct {
				Cluster string `json:"cluster"`
				Item    *struct {
					Name string `json:"name"`
				} `json:"item"`
				End bool `json:"end"`
			}
			if err := json.Unmarshal([]byte(line), &l); err != nil {
				t.Fatalf("line %q on %s: %v", line, r.name, err)
			}
			switch {
			case l.End:
				got = append(got, l.Cluster+":end")
			case l.Item != nil:
				got = append(got, l.Cluster+"/"+l.Item.Name)
			}
		}
		if code != http.StatusOK || strings.Join(got, " ") != want || left != "" {
			t.Errorf("alice's pods on %s: %d %v, left out %q; want %s", r.name, code, got, left, want)
		}
	}
}
