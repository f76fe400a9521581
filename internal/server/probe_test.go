package server

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/hub"
	"github.com/tetherhq/tether/internal/testutil/fakecluster"
)

// TestProbeFailureSaysWhy: while the agent is connected but its API server
// doesn't answer /readyz well (a 500, or no answer within ProbeTimeout), the
// cluster is Unreachable with why, and Ready again once it answers.
func TestProbeFailureSaysWhy(t *testing.T) {
	tests := []struct {
		name string
		fail func(fc *fakecluster.Cluster)
		want string
	}{
		{"500", func(fc *fakecluster.Cluster) { fc.ReadyzStatus.Store(http.StatusInternalServerError) },
			"Unreachable: its API server answered /readyz with 500 Internal Server Error"},
		{"no answer", func(fc *fakecluster.Cluster) { fc.ReadyzDelay.Store(int64(time.Hour)) },
			"Unreachable: its API server didn't answer /readyz within 300ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fc := fakecluster.New(t)
			h := startHub(t, Config{Agents: testAgents("eu-1"), ProbeInterval: 100 * time.Millisecond, ProbeTimeout: 300 * time.Millisecond})
			a := startAgent(t, h.url, "eu-1", fc)
			eventually(t, 5*time.Second, "connected", a.Connected)
			eventually(t, 5*time.Second, "Ready", func() bool { return statusOf(h, "eu-1") == hub.Ready })

			tt.fail(fc)
			eventually(t, 5*time.Second, "the status says why: "+tt.want, func() bool { return statusOf(h, "eu-1") == tt.want })
			if !strings.Contains(h.logs.String(), `A cluster is Unreachable cluster="eu-1" why=`+strconv.Quote(strings.TrimPrefix(tt.want, "Unreachable: "))) {
				t.Errorf("the hub didn't log the change:\n%s", h.logs)
			}
			if got := h.Clusters()[0]; got.Status != hub.Unreachable || got.AgentVersion == "" || got.ConnectedSince.IsZero() {
				t.Errorf("status %+v: want Unreachable with its agent still connected", got)
			}

			fc.ReadyzStatus.Store(0)
			fc.ReadyzDelay.Store(0)
			eventually(t, 5*time.Second, "Ready again", func() bool { return statusOf(h, "eu-1") == hub.Ready })
		})
	}
}

// TestProbesKeepTheirConnection: each probe takes the connection the last
// one left, rather than making a TLS handshake with the API server every
// interval; with 10,000 clusters that was 1,000 handshakes a second.
func TestProbesKeepTheirConnection(t *testing.T) {
	fc := fakecluster.New(t)
	h := startHub(t, Config{Agents: testAgents("eu-1"), ProbeInterval: 50 * time.Millisecond})
	a := startAgent(t, h.url, "eu-1", fc)
	eventually(t, 5*time.Second, "connected", a.Connected)
	eventually(t, 5*time.Second, "ten probes", func() bool { return fc.Count("/readyz") >= 10 })
	conns := fc.ConnsFor("/readyz")
	if len(conns) != 1 {
		t.Errorf("ten probes came on %d connections (%v), want 1", len(conns), conns)
	}
}

// TestProbesLeaveALargeAnswersConnection: a person's GET takes the probes'
// kept connection; once a large answer has come on it, the probes make
// another and leave that one to expire, with the buffer crypto/tls grew
// for the answer's records.
func TestProbesLeaveALargeAnswersConnection(t *testing.T) {
	fc := fakecluster.New(t)
	h, _ := proxyHub(t, fc, "", func(c *Config) {
		c.ProbeInterval = 50 * time.Millisecond
		c.IdleTimeout = 500 * time.Millisecond
	})
	waitFirstProbe(t, h)
	if code, body, _ := call(t, "GET", h.url+"/clusters/open/large", aliceToken, nil); code != 200 || len(body) != 256<<10 {
		t.Fatalf("GET /large: %d, %d bytes", code, len(body))
	}
	var large string // the address the large answer's connection came from
	for k := range fc.ConnsFor("/large") {
		large = strings.TrimPrefix(k, "/large from ")
	}
	probesOnIt := func() int { return fc.ConnsFor("/readyz")["/readyz from "+large] }
	before, probes := probesOnIt(), fc.Count("/readyz")
	eventually(t, 5*time.Second, "ten more probes", func() bool { return fc.Count("/readyz") >= probes+10 })
	if got := probesOnIt(); got != before {
		t.Errorf("%d probes came on the large answer's connection after it, want none", got-before)
	}
	eventually(t, 5*time.Second, "the large answer's connection expired", func() bool { return h.agent("open").APIStreams == 1 })
}

// TestConnectedBeforeTheFirstProbe: between an agent's connecting and the
// first probe's answer, the cluster is Unreachable, as the hub can't say
// more yet, but not "Its agent isn't connected.": it is. Once the agent has
// gone, the cluster still says when it was last heard from.
func TestConnectedBeforeTheFirstProbe(t *testing.T) {
	fc := fakecluster.New(t)
	fc.ReadyzDelay.Store(int64(time.Hour)) // the first probe waits on /readyz
	h := startHub(t, Config{Agents: testAgents("eu-1"), ProbeTimeout: time.Minute})
	if st, _ := h.Cluster("eu-1"); st.Message != hub.MessageNotConnected {
		t.Fatalf("before the agent: %+v", st)
	}
	before := time.Now()
	a := startAgent(t, h.url, "eu-1", fc)
	eventually(t, 5*time.Second, "connected", a.Connected)
	eventually(t, 5*time.Second, "the first probe waits on /readyz", func() bool { return fc.Count("/readyz") >= 1 })
	if st, _ := h.Cluster("eu-1"); st.Status != hub.Unreachable || st.Message != hub.MessageChecking || st.ConnectedSince.IsZero() {
		t.Errorf("connected, first probe waiting: %+v, want Unreachable: %s", st, hub.MessageChecking)
	}
	fc.ReadyzDelay.Store(0)
	a.Stop(t)
	eventually(t, 5*time.Second, "the agent gone", func() bool {
		st, _ := h.Cluster("eu-1")
		return st.Message == hub.MessageNotConnected && st.ConnectedSince.IsZero()
	})
	if st, _ := h.Cluster("eu-1"); st.LastSeen.Before(before) || st.LastSeen.After(time.Now()) {
		t.Errorf("after the agent left, last seen %s; want when it was connected", st.LastSeen)
	}
	if c := h.Clusters()[0]; c.LastSeen.IsZero() {
		t.Errorf("the fleet's list lost the last seen time: %+v", c)
	}
}
