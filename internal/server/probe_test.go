package server

import (
	"context"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/hub"
)

// TestDefaults: a hub given no durations takes SPEC's: probes every 10 s
// with a 5 s timeout (section 2), a 60 s permission cache (section 5), and
// 10 s for an agent's hello. Serve leaves them zero, so these are the
// hub's in production.
func TestDefaults(t *testing.T) {
	h, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for _, d := range []struct {
		name      string
		got, want time.Duration
	}{
		{"ProbeInterval", h.cfg.ProbeInterval, 10 * time.Second},
		{"ProbeTimeout", h.cfg.ProbeTimeout, 5 * time.Second},
		{"HelloTimeout", h.cfg.HelloTimeout, 10 * time.Second},
		{"AccessTTL", h.cfg.AccessTTL, 60 * time.Second},
		{"the permission cache's lifetime", h.access.ttl, 60 * time.Second},
	} {
		if d.got != d.want {
			t.Errorf("%s = %s, want %s", d.name, d.got, d.want)
		}
	}
}

// TestProbeFailureSaysWhy: while the agent is connected but its API server
// doesn't answer /readyz well (a 500, or no answer within ProbeTimeout), the
// cluster is Unreachable with why, and Ready again once it answers.
func TestProbeFailureSaysWhy(t *testing.T) {
	tests := []struct {
		name string
		fail func(fc *fakeCluster)
		want string
	}{
		{"500", func(fc *fakeCluster) { fc.readyzStatus.Store(http.StatusInternalServerError) },
			"Unreachable: its API server answered /readyz with 500 Internal Server Error"},
		{"no answer", func(fc *fakeCluster) { fc.readyzDelay.Store(int64(time.Hour)) },
			"Unreachable: its API server didn't answer /readyz within 300ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fc := newFakeCluster(t)
			h := startHub(t, Config{Agents: testAgents("eu-1"), ProbeInterval: 100 * time.Millisecond, ProbeTimeout: 300 * time.Millisecond})
			a := startAgent(t, h.url, "eu-1", fc)
			eventually(t, 5*time.Second, "connected", a.Connected)
			eventually(t, 5*time.Second, "Ready", func() bool { return statusOf(h, "eu-1") == hub.Ready })

			tt.fail(fc)
			eventually(t, 5*time.Second, "the status says why: "+tt.want, func() bool { return statusOf(h, "eu-1") == tt.want })
			if !strings.Contains(h.logs.String(), `Cluster "eu-1" is `+tt.want) {
				t.Errorf("the hub didn't log the change:\n%s", h.logs)
			}
			if got := h.Clusters()[0]; got.Status != hub.Unreachable || got.AgentVersion == "" || got.ConnectedSince.IsZero() {
				t.Errorf("status %+v: want Unreachable with its agent still connected", got)
			}

			fc.readyzStatus.Store(0)
			fc.readyzDelay.Store(0)
			eventually(t, 5*time.Second, "Ready again", func() bool { return statusOf(h, "eu-1") == hub.Ready })
		})
	}
}

// TestProbesStartEveryInterval: SPEC section 2 probes every 10 s, so a slow
// API server is probed as often as a quick one: a probe starts every
// ProbeInterval, not ProbeInterval after the last one ended, and never
// sooner. Here /readyz takes 0.8 of the interval; probes counted over a
// window of 16 intervals number about 16, where waiting the interval after
// each probe would give at most 16/1.8, and not waiting at all about 20.
func TestProbesStartEveryInterval(t *testing.T) {
	const interval = 400 * time.Millisecond
	fc := newFakeCluster(t)
	fc.readyzDelay.Store(int64(interval * 4 / 5))
	h := startHub(t, Config{Agents: testAgents("eu-1"), ProbeInterval: interval})
	a := startAgent(t, h.url, "eu-1", fc)
	eventually(t, 5*time.Second, "connected", a.Connected)
	eventually(t, 5*time.Second, "Ready", func() bool { return statusOf(h, "eu-1") == hub.Ready })

	start, before := time.Now(), fc.count("/readyz")
	time.Sleep(16 * interval)
	got, elapsed := fc.count("/readyz")-before, time.Since(start)

	// Generous bounds, halfway between the right pace and the wrong ones:
	// at least one probe per 1.4 intervals (timers late by up to 0.4 of
	// one each on a loaded machine), at most one per interval (and one for
	// the window's edge).
	least := int(math.Floor(float64(elapsed) / float64(interval*7/5)))
	most := int(math.Ceil(float64(elapsed)/float64(interval))) + 1
	if got < least || got > most {
		t.Errorf("%d probes of a /readyz taking %s in %s with a %s interval; want %d to %d (one per interval)",
			got, interval*4/5, elapsed, interval, least, most)
	}
}

// TestProbeCutShortByADisconnectIsNotAStatus: a probe in flight when the
// agent's connection breaks fails because the tunnel ended, not because of
// the API server. The cluster's status and history say only that its agent
// isn't connected, and the log blames no API server. The probe here is run
// with a context that never ends, as the connection's may not have ended
// yet when the probe sees the tunnel go.
func TestProbeCutShortByADisconnectIsNotAStatus(t *testing.T) {
	fc := newFakeCluster(t)
	fc.readyzDelay.Store(int64(time.Hour)) // every probe waits on /readyz
	h := startHub(t, Config{Agents: testAgents("eu-1"), ProbeTimeout: time.Minute})
	p := hubProxy(t, h)
	a := startAgent(t, h.url, "eu-1", fc, viaProxy(t, p))
	eventually(t, 5*time.Second, "connected", a.Connected)
	c := h.connected("eu-1")
	probed := make(chan bool)
	go func() { probed <- h.probeAndRecord(context.Background(), c) }()
	eventually(t, 5*time.Second, "two probes wait on /readyz", func() bool { return fc.count("/readyz") >= 2 })

	p.Reset() // the connection breaks: the hub reads its end, no goodbye
	if <-probed {
		t.Error("the probe reports the connection up after it broke")
	}
	eventually(t, 5*time.Second, "the hub sees the agent go", func() bool {
		return strings.Contains(h.logs.String(), `The agent of "eu-1" disconnected`)
	})
	for _, ch := range h.History("eu-1") {
		if ch.Status != "Unreachable: "+hub.MessageNotConnected {
			t.Errorf("status history %v: the probe the disconnect cut short is in it", h.History("eu-1"))
			break
		}
	}
	if strings.Contains(h.logs.String(), "can't be reached") {
		t.Errorf("the hub blamed the API server for a probe the disconnect cut short:\n%s", h.logs)
	}
}

// TestProbesKeepTheirConnection: each probe takes the connection the last
// one left, rather than making a TLS handshake with the API server every
// interval; with 10,000 clusters that was 1,000 handshakes a second.
func TestProbesKeepTheirConnection(t *testing.T) {
	fc := newFakeCluster(t)
	h := startHub(t, Config{Agents: testAgents("eu-1"), ProbeInterval: 50 * time.Millisecond})
	a := startAgent(t, h.url, "eu-1", fc)
	eventually(t, 5*time.Second, "connected", a.Connected)
	eventually(t, 5*time.Second, "ten probes", func() bool { return fc.count("/readyz") >= 10 })
	conns := fc.connsFor("/readyz")
	if len(conns) != 1 {
		t.Errorf("ten probes came on %d connections (%v), want 1", len(conns), conns)
	}
}

// TestProbesLeaveALargeAnswersConnection: a person's GET takes the probes'
// kept connection; once a large answer has come on it, the probes make
// another and leave that one to expire, with the buffer crypto/tls grew
// for the answer's records.
func TestProbesLeaveALargeAnswersConnection(t *testing.T) {
	fc := newFakeCluster(t)
	h, _ := proxyHub(t, fc, "", func(c *Config) {
		c.ProbeInterval = 50 * time.Millisecond
		c.IdleTimeout = 500 * time.Millisecond
	})
	waitFirstProbe(t, h)
	if code, body, _ := call(t, "GET", h.url+"/clusters/open/large", aliceToken, nil); code != 200 || len(body) != 256<<10 {
		t.Fatalf("GET /large: %d, %d bytes", code, len(body))
	}
	var large string // the address the large answer's connection came from
	for k := range fc.connsFor("/large") {
		large = strings.TrimPrefix(k, "/large from ")
	}
	probesOnIt := func() int { return fc.connsFor("/readyz")["/readyz from "+large] }
	before, probes := probesOnIt(), fc.count("/readyz")
	eventually(t, 5*time.Second, "ten more probes", func() bool { return fc.count("/readyz") >= probes+10 })
	if got := probesOnIt(); got != before {
		t.Errorf("%d probes came on the large answer's connection after it, want none", got-before)
	}
	open := h.connected("open")
	eventually(t, 5*time.Second, "the large answer's connection expired", func() bool { return open.apiStreams() == 1 })
}

// TestConnectedBeforeTheFirstProbe: between an agent's connecting and the
// first probe's answer, the cluster is Unreachable, as the hub can't say
// more yet, but not "Its agent isn't connected.": it is. Once the agent has
// gone, the cluster still says when it was last heard from.
func TestConnectedBeforeTheFirstProbe(t *testing.T) {
	fc := newFakeCluster(t)
	fc.readyzDelay.Store(int64(time.Hour)) // the first probe waits on /readyz
	h := startHub(t, Config{Agents: testAgents("eu-1"), ProbeTimeout: time.Minute})
	if st, _ := h.Cluster("eu-1"); st.Message != hub.MessageNotConnected {
		t.Fatalf("before the agent: %+v", st)
	}
	before := time.Now()
	a := startAgent(t, h.url, "eu-1", fc)
	eventually(t, 5*time.Second, "connected", a.Connected)
	eventually(t, 5*time.Second, "the first probe waits on /readyz", func() bool { return fc.count("/readyz") >= 1 })
	if st, _ := h.Cluster("eu-1"); st.Status != hub.Unreachable || st.Message != hub.MessageChecking || st.ConnectedSince.IsZero() {
		t.Errorf("connected, first probe waiting: %+v, want Unreachable: %s", st, hub.MessageChecking)
	}
	fc.readyzDelay.Store(0)
	a.stop(t)
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
