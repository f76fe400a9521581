package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/hub"
	"github.com/tetherhq/tether/internal/inventory/store"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/tetherhq/tether/internal/agent"
	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/listfile"
	"github.com/tetherhq/tether/internal/testutil/agenttest"
	"github.com/tetherhq/tether/internal/testutil/fakecluster"
	"github.com/tetherhq/tether/internal/testutil/syncbuf"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testHub is a Hub behind an httptest server.
type testHub struct {
	*Hub
	inventory *store.Store // the registry's
	srv       *httptest.Server
	url       string
	logs      *syncbuf.Buffer
	reg       *prometheus.Registry
	agents    map[string]*runningAgent // those a helper started for the test
}

const testToken = "0123456789abcdef0123456789abcdef-agent-token"

// testAgents is an agents list with the clusters the tests use, all with
// testToken.
func testAgents(names ...string) *fleet.Agents {
	var list []fleet.Agent
	for _, n := range names {
		list = append(list, fleet.Agent{Name: n, TokenHashes: []listfile.Hash{listfile.HashToken(testToken)}, Groups: fleet.Groups{Everyone: true}})
	}
	return fleet.New(list)
}

// selfURL, as Config.PublicURL, stands for the test server's own address:
// a browser opens the hub there, and the hub takes sign-ins from no other
// origin.
const selfURL = "<the test server's URL>"

// selfPublic is the mod of proxyHub and the like that sets selfURL.
func selfPublic(c *Config) { c.PublicURL = selfURL }

func startHub(t *testing.T, cfg Config) *testHub {
	t.Helper()
	return startHubWith(t, cfg, nil)
}

// startTLSHub is startHub serving HTTPS with cert.
func startTLSHub(t *testing.T, cfg Config, cert tls.Certificate) *testHub {
	t.Helper()
	return startHubWith(t, cfg, &cert)
}

func startHubWith(t *testing.T, cfg Config, cert *tls.Certificate) *testHub {
	t.Helper()
	th := &testHub{logs: &syncbuf.Buffer{}, reg: prometheus.NewRegistry()}
	cfg.Logger = slogTo(th.logs)
	cfg.Registerer = th.reg
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = time.Second
	}
	if cfg.ProbeInterval == 0 {
		cfg.ProbeInterval = 200 * time.Millisecond
	}
	th.srv = httptest.NewUnstartedServer(nil)
	if cfg.PublicURL == selfURL {
		scheme := "http"
		if cert != nil {
			scheme = "https"
		}
		cfg.PublicURL = scheme + "://" + th.srv.Listener.Addr().String()
	}
	h, err := New(cfg)
	if err != nil {
		th.srv.Close()
		t.Fatal(err)
	}
	th.Hub = h
	th.inventory = h.registry.Inventory()
	th.srv.Config.Handler = h.Handler()
	if cert != nil {
		th.srv.TLS = &tls.Config{Certificates: []tls.Certificate{*cert}}
		th.srv.StartTLS()
	} else {
		th.srv.Start()
	}
	th.url = th.srv.URL
	t.Cleanup(func() {
		th.srv.Config.Shutdown(context.Background())
		h.Close()
		th.srv.Close()
	})
	return th
}

func (th *testHub) counter(name string, labels ...string) float64 {
	switch name {
	case "takeovers":
		return th.value("tether_agent_takeovers_total")
	case "connects":
		return th.value("tether_agent_connects_total", labels...)
	case "caChanges":
		return th.value("tether_agent_ca_changes_total")
	}
	panic("unknown counter " + name)
}

// value returns the metric name's value in the hub's registry, for the
// series whose label values, in the order of their names, are labels: 0
// when there is none.
func (th *testHub) value(name string, labels ...string) float64 {
	families, err := th.reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			pairs := m.GetLabel()
			if len(pairs) != len(labels) {
				continue
			}
			for i, p := range pairs {
				if p.GetValue() != labels[i] {
					continue series
				}
			}
			switch {
			case m.Counter != nil:
				return m.GetCounter().GetValue()
			case m.Gauge != nil:
				return m.GetGauge().GetValue()
			case m.Histogram != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return 0
}

// connected returns the connection of cluster name's agent, or nil.
func (th *testHub) connected(name string) hub.Upstream { return th.registry.Reach(name) }

// streamsOpen is tether_streams_open.
func (th *testHub) streamsOpen() float64 { return th.value("tether_streams_open") }

func (th *testHub) Cluster(name string) (hub.ClusterStatus, bool) { return th.registry.Cluster(name) }
func (th *testHub) Clusters() []hub.ClusterStatus                 { return th.registry.Clusters() }
func (th *testHub) History(name string) []hub.StatusChange        { return th.registry.History(name) }

// runningAgent is an agent running in a goroutine the test owns.
type runningAgent = agenttest.Agent

// startAgent runs an agent for the cluster fc, named name, against hubURL.
// Each mod may change its config before it starts.
func startAgent(t *testing.T, hubURL, name string, fc *fakecluster.Cluster, mods ...func(*agent.Config)) *runningAgent {
	t.Helper()
	return agenttest.Start(t, hubURL, name, testToken, fc.SADir, fc.Addr(), mods...)
}

// startAgentFor runs an agent named name against hubURL for the API server
// at apiAddr, with the service account directory saDir.
func startAgentFor(t *testing.T, hubURL, name, saDir, apiAddr string, mods ...func(*agent.Config)) *runningAgent {
	t.Helper()
	return agenttest.Start(t, hubURL, name, testToken, saDir, apiAddr, mods...)
}

// eventually polls cond every 10 ms until it holds or within passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func statusOf(h *testHub, name string) string {
	st, ok := h.Cluster(name)
	if !ok {
		return fmt.Sprintf("no cluster %q", name)
	}
	return st.String()
}

// watches counts the watches person holds open on cluster.
func (th *testHub) watches(cluster, person string) int {
	_, watches, _ := th.proxy.Holds(cluster, person)
	return watches
}

// agent is what the hub knows of cluster name's connected agent.
func (th *testHub) agent(name string) hub.AgentInfo {
	info, _ := th.registry.Agent(name)
	return info
}
