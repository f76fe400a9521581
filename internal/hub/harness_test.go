package hub

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tetherhq/tether/internal/agent"
	"github.com/tetherhq/tether/internal/protocol"
	"github.com/tetherhq/tether/internal/testutil/agenttest"
	"github.com/tetherhq/tether/internal/testutil/fakecluster"
	"github.com/tetherhq/tether/internal/testutil/faultproxy"
	"github.com/tetherhq/tether/internal/testutil/syncbuf"
	"github.com/tetherhq/tether/internal/tunnel"
)

// The hub's own tests run the registry alone, behind an httptest server
// that takes agents, with real agents (agenttest) for fake clusters
// (fakecluster). What people reach through it is tested whole in
// internal/server.

// testHub is a Hub behind an httptest server.
type testHub struct {
	*Hub
	srv  *httptest.Server
	url  string
	logs *syncbuf.Buffer
	reg  *prometheus.Registry
}

func startHub(t *testing.T, cfg Config) *testHub {
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
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	th.Hub = h
	mux := http.NewServeMux()
	mux.HandleFunc("/api/agent", h.ServeAgent)
	th.srv = httptest.NewServer(mux)
	th.url = th.srv.URL
	t.Cleanup(func() {
		th.srv.Config.Shutdown(context.Background())
		h.Close()
		th.srv.Close()
	})
	return th
}

// startAgent runs an agent for the cluster fc, named name, against hubURL.
func startAgent(t *testing.T, hubURL, name string, fc *fakecluster.Cluster, mods ...func(*agent.Config)) *agenttest.Agent {
	t.Helper()
	return agenttest.Start(t, hubURL, name, testToken, fc.SADir, fc.Addr(), mods...)
}

// rawAgent upgrades as eu-1, with its token, and then misbehaves as told.
func rawAgent(t *testing.T, h *testHub) *tunnel.Session {
	t.Helper()
	return agenttest.Raw(t, h.url, "eu-1", testToken)
}

// helloFor is the hello a real agent of cluster fc sends.
func helloFor(fc *fakecluster.Cluster) protocol.Message {
	return protocol.Message{Type: protocol.TypeHello, Protocol: protocol.Version, AgentVersion: "test", CACert: string(fc.CA.CertPEM),
		ServiceAccountToken: "service-account-token-1", APIServer: fc.Addr()}
}

// hubProxy starts a fault proxy in front of h's address, closed when the
// test ends.
func hubProxy(t *testing.T, h *testHub) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New(strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func statusOf(h *testHub, name string) string {
	st, ok := h.Cluster(name)
	if !ok {
		return fmt.Sprintf("no cluster %q", name)
	}
	return st.String()
}

// resources is what a leak would leave behind.
type resources struct{ goroutines, fds int }

func measure() resources {
	fds := -1
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		fds = len(ents)
	}
	return resources{goroutines: runtime.NumGoroutine(), fds: fds}
}

// settles waits until the hub's streams are all closed and goroutines and
// descriptors are back to base, give or take the runtime's and the test
// framework's own (8).
func settles(t *testing.T, h *testHub, base resources, within time.Duration) {
	t.Helper()
	var now resources
	eventually(t, within, "streams, goroutines and descriptors back to baseline", func() bool {
		now = measure()
		return h.streamsOpen() == 0 &&
			testutil.ToFloat64(h.metrics.streamsOpened) == testutil.ToFloat64(h.metrics.streamsClosed) &&
			now.goroutines <= base.goroutines+8 && now.fds <= base.fds+8
	})
}
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
