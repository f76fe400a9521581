package agent_test

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/agent"
	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/hub"
	"github.com/tetherhq/tether/internal/listfile"
	"github.com/tetherhq/tether/internal/pki"
	"github.com/tetherhq/tether/internal/testutil/agenttest"
	"github.com/tetherhq/tether/internal/testutil/connectproxy"
	"github.com/tetherhq/tether/internal/testutil/fakecluster"
)

// recordWaits makes the agent report each wait on a channel instead of
// sleeping.
func recordWaits(waits chan time.Duration) func(*agent.Config) {
	return func(c *agent.Config) {
		c.Sleep = func(ctx context.Context, d time.Duration) error {
			select {
			case waits <- d:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
}

func TestAgentHonoursRetryAfterAndReportsOtherAnswers(t *testing.T) {
	fc := fakecluster.New(t)
	tests := []struct {
		name     string
		handler  http.HandlerFunc
		wantLog  string
		wantWait time.Duration // 0: any backoff wait
	}{
		{"overloaded", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "7")
			http.Error(w, "busy", http.StatusServiceUnavailable)
		}, "it answered 503 Service Unavailable", 7 * time.Second},
		{"login page", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "https://login.example.com/", http.StatusFound)
		}, "it answered 302 Found, redirecting to https://login.example.com/", 0},
		{"broken proxy", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "bad gateway", http.StatusBadGateway)
		}, "it answered 502 Bad Gateway", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(tt.handler)
			defer srv.Close()
			waits := make(chan time.Duration)
			a := startAgent(t, srv.URL, "eu-1", fc, recordWaits(waits))
			d := <-waits
			if tt.wantWait != 0 && d != tt.wantWait {
				t.Errorf("waited %s, want the %s the hub asked for", d, tt.wantWait)
			}
			if tt.wantWait == 0 && (d < 800*time.Millisecond || d > 1200*time.Millisecond) {
				t.Errorf("waited %s, want the first backoff step", d)
			}
			want := "Can't reach the hub at " + srv.URL + ": " + tt.wantLog
			if !strings.Contains(a.Logs.String(), want) {
				t.Errorf("the agent's log lacks %q:\n%s", want, a.Logs)
			}
			a.Stop(t)
		})
	}
}

func TestAgentConnectsThroughItsProxy(t *testing.T) {
	fc := fakecluster.New(t)
	h := startHub(t, nil)
	proxy := connectproxy.Start(t)
	a := startAgent(t, h.url, "eu-1", fc, func(c *agent.Config) { c.Proxy = http.ProxyURL(proxy.URL) })
	eventually(t, 5*time.Second, "connected through the proxy", a.Connected)
	if proxy.Tunnelled() == 0 {
		t.Fatal("the agent connected without its proxy")
	}
	a.Stop(t)
}

func TestAgentChecksTheHubCertificate(t *testing.T) {
	fc := fakecluster.New(t)
	hubCA, err := pki.NewCA("hub CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := hubCA.IssueTLS(pki.Leaf{CommonName: "hub", Hosts: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	h := startHub(t, &cert)
	caFile := filepath.Join(t.TempDir(), "hub-ca.pem")
	if err := os.WriteFile(caFile, hubCA.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	trusting := startAgent(t, h.url, "eu-1", fc, func(c *agent.Config) { c.HubCAFile = caFile })
	eventually(t, 5*time.Second, "an agent that trusts the hub's CA connects", trusting.Connected)
	if strings.Contains(trusting.Logs.String(), "plain http") {
		t.Error("an https hub got the plain-http warning")
	}
	trusting.Stop(t)

	// The system roots don't vouch for the test CA: the agent must not
	// connect, and must keep trying (a TLS error is no refusal).
	doubting := startAgent(t, h.url, "eu-1", fc)
	eventually(t, 5*time.Second, "the agent reports the bad certificate", func() bool {
		return strings.Contains(doubting.Logs.String(), "Can't reach the hub at "+h.url+": tls: failed to verify certificate")
	})
	if !strings.Contains(doubting.Logs.String(), "needs that CA in TETHER_HUB_CA") {
		t.Errorf("the certificate error doesn't say what to set:\n%s", doubting.Logs)
	}
	// It keeps trying: a second attempt fails as the first did, and the
	// agent still runs.
	eventually(t, 10*time.Second, "the agent tries again", func() bool {
		select {
		case <-doubting.Done():
			t.Fatalf("the agent stopped: %v", doubting.Err())
		default:
		}
		return strings.Count(doubting.Logs.String(), "Can't reach the hub at "+h.url+": tls: failed to verify certificate") >= 2
	})
	if doubting.Connected() {
		t.Fatal("connected to a hub whose certificate it can't check")
	}
	select {
	case <-doubting.Done():
		t.Fatalf("the agent stopped: %v", doubting.Err())
	default:
	}
}

// TestAgentOnAWrongPathIsToldWhatToCheck: a TETHER_HUB_URL with a path the
// hub doesn't serve (a base path it hasn't, /api/agent given twice) gets a
// 404, which the agent logs with what to check, and keeps trying.
func TestAgentOnAWrongPathIsToldWhatToCheck(t *testing.T) {
	fc := fakecluster.New(t)
	h := startHub(t, nil)
	a := startAgent(t, h.url+"/api/agent", "eu-1", fc)
	eventually(t, 5*time.Second, "the agent logs the 404", func() bool {
		return strings.Contains(a.Logs.String(), "it answered 404 Not Found (is TETHER_HUB_URL the hub's address")
	})
	if a.Connected() {
		t.Fatal("connected on a path the hub doesn't serve")
	}
}

// The agent's tests against a real hub: the registry alone (internal/hub),
// which admits agents as tether hub does, for fake clusters.

const testToken = "0123456789abcdef0123456789abcdef-agent-token"

// testHub is a hub that takes the agent of cluster eu-1.
type testHub struct{ url string }

func startHub(t *testing.T, cert *tls.Certificate) *testHub {
	t.Helper()
	h, err := hub.New(hub.Config{
		Agents:        fleet.New([]fleet.Agent{{Name: "eu-1", TokenHashes: []listfile.Hash{listfile.HashToken(testToken)}, Groups: fleet.Groups{Everyone: true}}}),
		Heartbeat:     time.Second,
		ProbeInterval: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/api/agent", h.ServeAgent)
	srv := httptest.NewUnstartedServer(mux)
	if cert != nil {
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{*cert}}
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(func() {
		srv.Config.Shutdown(context.Background())
		h.Close()
		srv.Close()
	})
	return &testHub{url: srv.URL}
}

func startAgent(t *testing.T, hubURL, name string, fc *fakecluster.Cluster, mods ...func(*agent.Config)) *agenttest.Agent {
	t.Helper()
	return agenttest.Start(t, hubURL, name, testToken, fc.SADir, fc.Addr(), mods...)
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
