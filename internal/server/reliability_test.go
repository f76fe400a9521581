package server

import (
	"crypto/tls"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/agent"
	"github.com/tetherhq/tether/internal/pki"
	"github.com/tetherhq/tether/internal/testutil/fakecluster"
	"github.com/tetherhq/tether/internal/testutil/faultproxy"
	"github.com/tetherhq/tether/internal/testutil/syncbuf"
)

// hubBehindProxy starts a hub and an agent that reaches it through a fault
// proxy.
func hubBehindProxy(t *testing.T, heartbeat time.Duration) (*testHub, *runningAgent, *faultproxy.Proxy) {
	t.Helper()
	fc := fakecluster.New(t)
	h := startHub(t, Config{Agents: testAgents("eu-1"), Heartbeat: heartbeat, ProbeInterval: time.Hour})
	p := hubProxy(t, h)
	a := startAgent(t, h.url, "eu-1", fc, viaProxy(t, p))
	eventually(t, 5*time.Second, "connected", func() bool { return a.Connected() && h.connected("eu-1") != nil })
	return h, a, p
}

func TestBlackholeEachDirection(t *testing.T) {
	const heartbeat = time.Second
	// SPEC: both sides notice within two heartbeats and a second. The test
	// allows one more heartbeat for a busy machine, and logs what it saw.
	const within = 2*heartbeat + time.Second + heartbeat
	for _, dir := range []struct {
		name string
		d    faultproxy.Direction
	}{{"agent to hub", faultproxy.Up}, {"hub to agent", faultproxy.Down}} {
		t.Run(dir.name, func(t *testing.T) {
			h, a, p := hubBehindProxy(t, heartbeat)
			conn := h.connected("eu-1")
			start := time.Now()
			p.SetFaults(dir.d, faultproxy.Faults{Blackhole: true})
			var agentSaw, hubSaw time.Duration
			eventually(t, 3*within, "both sides notice", func() bool {
				if agentSaw == 0 && !a.Connected() {
					agentSaw = time.Since(start)
				}
				if hubSaw == 0 && h.connected("eu-1") != conn {
					hubSaw = time.Since(start)
				}
				return agentSaw > 0 && hubSaw > 0
			})
			t.Logf("blackholed %s: the agent noticed after %s, the hub after %s (heartbeat %s)", dir.name,
				agentSaw.Round(time.Millisecond), hubSaw.Round(time.Millisecond), heartbeat)
			if agentSaw > within || hubSaw > within {
				t.Errorf("noticed after %s (agent) and %s (hub), want within %s", agentSaw, hubSaw, within)
			}
			p.SetFaults(dir.d, faultproxy.Faults{})
			eventually(t, 10*time.Second, "the agent is back once the path is", func() bool {
				return a.Connected() && h.connected("eu-1") != nil
			})
		})
	}
}

// TestIdleTimeoutProxyKeepsHeartbeatingTunnel: a proxy that closes
// connections idle for 60 s (here 2 s) never closes a tunnel whose
// heartbeats come every 30 s (here 1 s). At 0.5 s and 1 s, the longest
// silence on a loaded machine was 747 ms: too close.
func TestIdleTimeoutProxyKeepsHeartbeatingTunnel(t *testing.T) {
	h, a, p := hubBehindProxy(t, time.Second)
	const idle = 2 * time.Second
	p.SetIdleTimeout(idle)
	// The proxy does close idle connections: one that says nothing is cut.
	raw, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	cutAt := time.Now()
	raw.SetReadDeadline(time.Now().Add(10 * idle))
	if _, err := raw.Read(make([]byte, 1)); err == nil || isTimeoutErr(err) {
		t.Fatalf("an idle connection through the proxy: %v, want it closed", err)
	}
	t.Logf("the proxy closed an idle connection after %s", time.Since(cutAt).Round(time.Millisecond))

	conn := h.connected("eu-1")
	time.Sleep(4 * idle)
	if h.connected("eu-1") != conn || !a.Connected() {
		t.Fatalf("the tunnel was dropped behind an idle-closing proxy:\n%s", h.logs)
	}
	if got := h.counter("connects", "accepted"); got != 1 {
		t.Fatalf("%v connects, want the first only", got)
	}
}

func TestTakeoverRace(t *testing.T) {
	fc := fakecluster.New(t)
	h := startHub(t, Config{Agents: testAgents("eu-1"), ProbeInterval: time.Hour})
	base := measure()

	// Two agents with the same name and token, each started again as soon
	// as it is taken over, as Kubernetes would restart it.
	stop := make(chan struct{})
	var runs atomic.Int64
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				a := startAgent(t, h.url, "eu-1", fc)
				runs.Add(1)
				select {
				case <-a.Done():
				case <-stop:
					a.Cancel()
					<-a.Done()
					return
				}
			}
		}()
	}
	// Watch the hub all the while: never more than one agent connected.
	var most float64
	deadline := time.Now().Add(4 * time.Second)
	for time.Now().Before(deadline) {
		if n := h.value("tether_agents_connected"); n > most {
			most = n
		}
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()

	takeovers := h.counter("takeovers")
	warnings := strings.Count(h.logs.String(), `WARN  An agent was taken over by another agent with the same name and token agent="eu-1"`)
	t.Logf("%d agent runs, %v takeovers, %d takeover warnings; at most %v connected at once", runs.Load(), takeovers, warnings, most)
	if most > 1 {
		t.Errorf("the connected gauge reached %v for one cluster", most)
	}
	if takeovers < 10 || float64(warnings) != takeovers {
		t.Errorf("%v takeovers counted, %d logged: want many, each logged", takeovers, warnings)
	}
	eventually(t, 5*time.Second, "no agent connected", func() bool { return h.value("tether_agents_connected") == 0 })
	var now resources
	eventually(t, 10*time.Second, "goroutines and descriptors back to baseline", func() bool {
		now = measure()
		return now.goroutines <= base.goroutines+leakSlack && now.fds <= base.fds+leakSlack
	})
	t.Logf("after the race: goroutines %d (baseline %d), fds %d (baseline %d)", now.goroutines, base.goroutines, now.fds, base.fds)
}

// TestLyingAgentGetsNoRequestThrough: an agent sends one CA and relays to a
// server whose certificate another CA signed. The hub must refuse that
// server, so nothing it would impersonate anyone with ever reaches it.
func TestLyingAgentGetsNoRequestThrough(t *testing.T) {
	fc := fakecluster.New(t) // the CA the agent sends, and its directory
	otherCA, err := pki.NewCA("impostor CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := otherCA.IssueTLS(pki.Leaf{CommonName: "kube-apiserver", Hosts: []string{"kubernetes.default.svc", "127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	var reached atomic.Int64
	impostor := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
	}))
	impostorLog := &syncbuf.Buffer{}
	impostor.Config.ErrorLog = log.New(impostorLog, "", 0)
	impostor.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	impostor.StartTLS()
	defer impostor.Close()

	h, _ := proxyHub(t, fc, "", func(c *Config) { c.ProbeInterval = 50 * time.Millisecond })
	startAgent(t, h.url, "ops", fc, func(c *agent.Config) { c.APIServer = impostor.Listener.Addr().String() })
	eventually(t, 5*time.Second, "the liar took over ops", func() bool {
		c := h.connected("ops")
		return c != nil && h.agent("ops").APIServer == impostor.Listener.Addr().String()
	})
	for _, who := range []struct{ token, path string }{
		{bobToken, "/clusters/ops/api/v1/namespaces"},
		{bobToken, "/clusters/ops/api/v1/namespaces/default/pods/x/exec?command=sh"},
	} {
		status, body, _ := call(t, "GET", h.url+who.path, who.token, nil)
		if status != http.StatusServiceUnavailable || !strings.Contains(body, "certificate") {
			t.Errorf("%s through the liar: %d %s, want 503 naming the certificate", who.path, status, body)
		}
	}
	eventually(t, 5*time.Second, "probes fail too", func() bool { return strings.HasPrefix(statusOf(h, "ops"), "Unreachable") })
	if n := reached.Load(); n != 0 {
		t.Fatalf("%d requests reached the impostor", n)
	}
	if !strings.Contains(impostorLog.String(), "bad certificate") && !strings.Contains(impostorLog.String(), "unknown certificate authority") {
		t.Errorf("the impostor's log doesn't show the hub refusing its certificate:\n%s", impostorLog)
	}
	t.Logf("status of the cluster behind the liar: %s", statusOf(h, "ops"))
}
