package server

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/testutil/fakecluster"
)

// TestMetricsMove checks that the hub's metrics are there and follow load:
// requests are counted by cluster and code, bytes and round trips are
// measured, and streams open go back to 0 once the load is over.
func TestMetricsMove(t *testing.T) {
	fc := fakecluster.New(t)
	h, _ := proxyHub(t, fc, "", func(c *Config) {
		c.IdleTimeout = 200 * time.Millisecond
		c.ProbeInterval = time.Hour // one probe per connection, at its start
	})
	for range 20 {
		if code, body, _ := call(t, "GET", h.url+"/clusters/open/api", aliceToken, nil); code != 200 {
			t.Fatalf("%d %s", code, body)
		}
	}
	call(t, "GET", h.url+"/clusters/ops/api", aliceToken, nil) // a 404
	for i := range 5 {                                         // names nobody listed
		call(t, "GET", fmt.Sprintf("%s/clusters/made-up-%d/api", h.url, i), aliceToken, nil)
	}

	// A request is counted once its answer has gone out, on the goroutine
	// of the connection it came on: a count may come a moment after the
	// client has its answer. Counts only grow, so once each has reached
	// its value, one past it shows too.
	count := func(cluster, code string) float64 {
		return h.value("tether_requests_total", cluster, code)
	}
	eventually(t, 5*time.Second, "every request counted: 20 to open, 1 to ops, 5 to unlisted names as unknown (unlisted names must not become labels)", func() bool {
		return count("open", "200") >= 20 && count("ops", "404") >= 1 && count("unknown", "404") >= 5
	})
	for _, c := range []struct {
		cluster, code string
		want          float64
	}{{"open", "200", 20}, {"ops", "404", 1}, {"unknown", "404", 5}} {
		if got := count(c.cluster, c.code); got != c.want {
			t.Errorf("requests{%s,%s} = %v, want %v", c.cluster, c.code, got, c.want)
		}
	}
	if h.value("tether_relayed_bytes_total", "to_cluster") == 0 || h.value("tether_relayed_bytes_total", "from_cluster") == 0 {
		t.Error("no bytes relayed counted")
	}
	if got := h.value("tether_agents_connected"); got != 2 {
		t.Errorf("agents connected = %v, want 2", got)
	}
	eventually(t, 5*time.Second, "a heartbeat round trip is measured", func() bool {
		n, _ := testutil.GatherAndCount(h.reg, "tether_heartbeat_rtt_seconds")
		return n > 0 && strings.Contains(gathered(t, h), "tether_heartbeat_rtt_seconds_count")
	})
	eventually(t, 5*time.Second, "streams open back to 0 once idle connections close", func() bool { return h.streamsOpen() == 0 })
	for _, name := range []string{"tether_agents_connected", "tether_agent_connects_total", "tether_streams_open", "tether_relayed_bytes_total",
		"tether_requests_total", "tether_request_duration_seconds", "tether_heartbeat_rtt_seconds"} {
		if !strings.Contains(gathered(t, h), name) {
			t.Errorf("metric %s is missing", name)
		}
	}
}

func gathered(t *testing.T, h *testHub) string {
	t.Helper()
	families, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, f := range families {
		b.WriteString(f.GetName())
		b.WriteString("\n")
		if f.GetName() == "tether_heartbeat_rtt_seconds" && len(f.Metric) > 0 && f.Metric[0].GetHistogram().GetSampleCount() > 0 {
			b.WriteString("tether_heartbeat_rtt_seconds_count\n")
		}
	}
	return b.String()
}

// TestClusterReadyMetric: tether_cluster_ready has one series per listed
// cluster, 1 when Ready, 0 when not, for alerts on an Unreachable one.
func TestClusterReadyMetric(t *testing.T) {
	fc := fakecluster.New(t)
	h, _ := proxyHub(t, fc, "", func(c *Config) { c.ProbeInterval = time.Hour })
	waitFirstProbe(t, h) // open and ops are Ready; far has no agent
	want := `# HELP tether_cluster_ready 1 for a cluster whose API server answers the hub's probe through its tunnel (Ready), 0 for one that is Unreachable; one series per cluster in the agents list.
# TYPE tether_cluster_ready gauge
tether_cluster_ready{cluster="far"} 0
tether_cluster_ready{cluster="open"} 1
tether_cluster_ready{cluster="ops"} 1
`
	if err := testutil.GatherAndCompare(h.reg, strings.NewReader(want), "tether_cluster_ready"); err != nil {
		t.Error(err)
	}
}

// TestRemovedClusterLeavesTheMetrics: a cluster the agents list no longer
// names drops its request series, and a cluster still listed keeps its own.
func TestRemovedClusterLeavesTheMetrics(t *testing.T) {
	fc := fakecluster.New(t)
	h, _ := proxyHub(t, fc, "", func(c *Config) { c.ProbeInterval = time.Hour })
	for _, name := range []string{"open", "ops"} {
		if code, body, _ := call(t, "GET", h.url+"/clusters/"+name+"/api", bobToken, nil); code != 200 {
			t.Fatalf("%s: %d %s", name, code, body)
		}
	}
	series := func(metric, cluster string) int {
		t.Helper()
		families, err := h.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, f := range families {
			if f.GetName() != metric {
				continue
			}
			for _, m := range f.Metric {
				for _, l := range m.Label {
					if l.GetName() == "cluster" && l.GetValue() == cluster {
						n++
					}
				}
			}
		}
		return n
	}
	// A request is counted once its answer has gone out, so the counts may
	// come a moment after the answer.
	for _, name := range []string{"open", "ops"} {
		eventually(t, 5*time.Second, "request series for "+name, func() bool {
			return series("tether_requests_total", name) > 0 && series("tether_request_duration_seconds", name) > 0
		})
	}

	var keep []fleet.Agent
	for _, a := range h.cfg.Agents.List() {
		if a.Name != "open" {
			keep = append(keep, a)
		}
	}
	h.AgentsChanged(h.cfg.Agents.Replace(keep))
	if n := series("tether_requests_total", "open") + series("tether_request_duration_seconds", "open"); n != 0 {
		t.Errorf("the removed cluster still has %d request series", n)
	}
	if series("tether_requests_total", "ops") != 1 || series("tether_request_duration_seconds", "ops") != 1 {
		t.Error("the cluster still listed lost its request series")
	}
	// A request to the name now gone is counted as unknown, not as it.
	call(t, "GET", h.url+"/clusters/open/api", bobToken, nil)
	eventually(t, 5*time.Second, "the request is counted", func() bool { return h.value("tether_requests_total", "unknown", "404") == 1 })
	if n := series("tether_requests_total", "open"); n != 0 {
		t.Errorf("a request after the change made %d series for the removed cluster", n)
	}
}
