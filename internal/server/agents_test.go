package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/agent"
	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/listfile"
	"github.com/tetherhq/tether/internal/protocol"
	"github.com/tetherhq/tether/internal/testutil/fakecluster"
)

func TestAgentConnectsAndClusterTurnsReady(t *testing.T) {
	fc := fakecluster.New(t)
	h := startHub(t, Config{Agents: testAgents("eu-1", "us-1")})
	if got := statusOf(h, "eu-1"); got != "Unreachable: Its agent isn't connected." {
		t.Fatalf("before the agent: %q", got)
	}
	a := startAgent(t, h.url, "eu-1", fc)

	eventually(t, 5*time.Second, "the cluster turns Ready", func() bool { return statusOf(h, "eu-1") == "Ready" })
	st, _ := h.Cluster("eu-1")
	if st.KubernetesVersion != "v1.36.3-test" || st.AgentVersion == "" || st.ConnectedSince.IsZero() || st.LastSeen.IsZero() {
		t.Errorf("status = %+v", st)
	}
	if !a.Connected() {
		t.Error("the agent doesn't say it is connected")
	}
	if got := fc.LastToken(); got != "service-account-token-1" {
		t.Errorf("the probe reached the API server with token %q, want the agent's service account token", got)
	}
	if got := statusOf(h, "us-1"); got != "Unreachable: Its agent isn't connected." {
		t.Errorf("the other cluster: %q", got)
	}
	if _, ok := h.Cluster("nowhere"); ok {
		t.Error("a cluster not in the list is known")
	}

	if err := a.Stop(t); err != nil {
		t.Fatalf("Run after cancel = %v, want nil", err)
	}
	eventually(t, 5*time.Second, "the cluster turns Unreachable", func() bool {
		return statusOf(h, "eu-1") == "Unreachable: Its agent isn't connected."
	})
	for _, line := range []string{
		`The agent of "eu-1" connected (Tether `,
		`A cluster is Ready cluster="eu-1" kubernetesVersion=v1.36.3-test`,
		`The agent of "eu-1" disconnected`,
		`why="the agent is stopping"`,
	} {
		if !strings.Contains(h.logs.String(), line) {
			t.Errorf("the hub's log lacks %q:\n%s", line, h.logs)
		}
	}
	for _, line := range []string{
		`agent for "eu-1", relaying to ` + fc.Addr(),
		`Connected to ` + h.url + ` as "eu-1"`,
		`is plain http: the agent's token will cross the network in clear`,
	} {
		if !strings.Contains(a.Logs.String(), line) {
			t.Errorf("the agent's log lacks %q:\n%s", line, a.Logs)
		}
	}
	assertNoSecrets(t, h.logs.String()+a.Logs.String())
}

func assertNoSecrets(t *testing.T, logs string) {
	t.Helper()
	for _, secret := range []string{testToken, "service-account-token"} {
		if strings.Contains(logs, secret) {
			t.Errorf("a log line holds a secret (%q):\n%s", secret, logs)
		}
	}
}

func TestRefusals(t *testing.T) {
	fc := fakecluster.New(t)
	h := startHub(t, Config{Agents: testAgents("eu-1")})
	noList := startHub(t, Config{})

	tests := []struct {
		name    string
		hub     *testHub
		agent   string
		token   string
		want    string
		hubLogs string
	}{
		{"wrong token", h, "eu-1", "a-wrong-token-of-at-least-32-characters", "refused this agent: it doesn't know this name and token.",
			`An agent was refused: "eu-1", with a token that doesn't match`},
		{"unknown name", h, "nowhere", testToken, "refused this agent: it doesn't know this name and token.",
			`An agent was refused: "nowhere", with a token that doesn't match`},
		{"no agents list", noList, "eu-1", testToken, "refused this agent: it takes no agents", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// With the health server on: a refused agent must still exit.
			a := startAgent(t, tt.hub.url, tt.agent, fc, func(c *agent.Config) { c.Token = tt.token; c.HealthAddr = freeAddr(t) })
			err := a.Wait(t, 5*time.Second)
			var refused *agent.RefusedError
			if !errors.As(err, &refused) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Run = %v, want a refusal saying %q", err, tt.want)
			}
			if !strings.HasPrefix(err.Error(), "The hub at "+tt.hub.url+" refused this agent: ") {
				t.Errorf("message %q doesn't name the hub as SPEC words it", err)
			}
			if !strings.Contains(a.Logs.String(), err.Error()) {
				t.Errorf("the agent didn't log its refusal:\n%s", a.Logs)
			}
			if !strings.Contains(tt.hub.logs.String(), tt.hubLogs) {
				t.Errorf("the hub's log lacks %q:\n%s", tt.hubLogs, tt.hub.logs)
			}
			assertNoSecrets(t, tt.hub.logs.String()+a.Logs.String()+err.Error())
			if strings.Contains(tt.hub.logs.String()+a.Logs.String(), tt.token) {
				t.Errorf("a log holds the token tried")
			}
		})
	}
	if got := h.counter("connects", "unauthorized"); got != 2 {
		t.Errorf("unauthorized connects = %v, want 2", got)
	}
}

// TestRefusalLogsAreRateLimited: refusal lines are rate-limited per name
// and address (SPEC section 2): 20 tries from each of two names and two
// addresses give one line for each name and address, not one in all.
func TestRefusalLogsAreRateLimited(t *testing.T) {
	h := startHub(t, Config{Agents: testAgents("eu-1", "us-1")})
	from := func(local string) *http.Client {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
		return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	}
	tries := []struct{ name, addr string }{{"eu-1", "127.0.0.1"}, {"us-1", "127.0.0.1"}, {"eu-1", "127.0.0.2"}}
	for i := 0; i < 20; i++ {
		for _, try := range tries {
			req, _ := http.NewRequest("GET", h.url+"/api/agent", nil)
			req.Header.Set("Tether-Agent", try.name)
			req.Header.Set("Authorization", "Bearer wrong")
			client := from(try.addr)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			client.CloseIdleConnections()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("status %d, want 401", resp.StatusCode)
			}
		}
	}
	logs := h.logs.String()
	if n := strings.Count(logs, "An agent was refused"); n != len(tries) {
		t.Errorf("%d refusal lines for 20 tries from each of %d names and addresses, want %d", n, len(tries), len(tries))
	}
	for _, try := range tries {
		n := 0
		for l := range strings.Lines(logs) {
			if strings.Contains(l, fmt.Sprintf("An agent was refused: %q", try.name)) && strings.Contains(l, "remote="+try.addr+":") {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d refusal lines for %q from %s, want 1", n, try.name, try.addr)
		}
	}
	if t.Failed() {
		t.Logf("hub log:\n%s", logs)
	}
}

func TestCAPinning(t *testing.T) {
	fc := fakecluster.New(t)
	other := fakecluster.New(t)
	list := fleet.New([]fleet.Agent{{
		Name: "eu-1", TokenHashes: []listfile.Hash{listfile.HashToken(testToken)}, Groups: fleet.Groups{Everyone: true},
		CASHA256: listfile.TokenSHA256(string(other.CA.CertPEM)),
	}})
	h := startHub(t, Config{Agents: list})
	a := startAgent(t, h.url, "eu-1", fc)
	err := a.Wait(t, 5*time.Second)
	// The hub knows the name and token here: the agent says the CA is the
	// reason, alone, not that the hub doesn't know it.
	want := "The hub at " + h.url + " refused this agent: this cluster's CA is not the one the hub's agents list pins for it (caSha256)."
	if err == nil || err.Error() != want {
		t.Fatalf("Run = %v, want %q", err, want)
	}
	if !strings.Contains(h.logs.String(), `An agent was refused: its CA is not the one its entry pins (caSha256) agent="eu-1"`) {
		t.Errorf("the hub didn't log why:\n%s", h.logs)
	}
}

// TestCAPinnedOnReload: a reload that pins another CA for a connected
// agent's cluster disconnects the agent, which is then refused; a pin of
// the CA it sent keeps it connected.
func TestCAPinnedOnReload(t *testing.T) {
	fc := fakecluster.New(t)
	other := fakecluster.New(t)
	entry := func(pin []byte) fleet.Agent {
		return fleet.Agent{Name: "eu-1", TokenHashes: []listfile.Hash{listfile.HashToken(testToken)}, Groups: fleet.Groups{Everyone: true},
			CASHA256: listfile.TokenSHA256(string(pin))}
	}
	list := fleet.New([]fleet.Agent{{Name: "eu-1", TokenHashes: []listfile.Hash{listfile.HashToken(testToken)}, Groups: fleet.Groups{Everyone: true}}})
	h := startHub(t, Config{Agents: list})
	a := startAgent(t, h.url, "eu-1", fc)
	eventually(t, 5*time.Second, "connected", a.Connected)

	h.AgentsChanged(list.Replace([]fleet.Agent{entry(fc.CA.CertPEM)}))
	if strings.Contains(h.logs.String(), "disconnecting its agent") {
		t.Fatalf("pinning the CA the agent sent disconnected it:\n%s", h.logs)
	}

	h.AgentsChanged(list.Replace([]fleet.Agent{entry(other.CA.CertPEM)}))
	err := a.Wait(t, 5*time.Second)
	if err == nil || !strings.Contains(err.Error(), "caSha256") {
		t.Fatalf("Run = %v, want a refusal naming caSha256 once the list pinned another CA", err)
	}
	if !strings.Contains(h.logs.String(), `The agents list changed: disconnecting an agent agent="eu-1"`) {
		t.Errorf("hub log:\n%s", h.logs)
	}
}

func TestCAChangeIsCounted(t *testing.T) {
	fc := fakecluster.New(t)
	h := startHub(t, Config{Agents: testAgents("eu-1")})
	a := startAgent(t, h.url, "eu-1", fc)
	eventually(t, 5*time.Second, "connected", a.Connected)
	a.Stop(t)
	eventually(t, 5*time.Second, "disconnected", func() bool { return h.connected("eu-1") == nil })

	other := fakecluster.New(t)
	other.SADir = fc.SADir // the same pod, a new CA
	writeFile(t, fc.SADir+"/ca.crt", other.CA.CertPEM)
	b := startAgent(t, h.url, "eu-1", fc)
	eventually(t, 5*time.Second, "connected again", b.Connected)
	if h.counter("caChanges") != 1 || !strings.Contains(h.logs.String(), `An agent sent a CA other than last time agent="eu-1"`) {
		t.Fatalf("CA change not counted and logged:\n%s", h.logs)
	}
	// The API server's certificate is not from the new CA: the probe must
	// fail the TLS check, and say so.
	eventually(t, 5*time.Second, "the cluster is Unreachable for its certificate", func() bool {
		s := statusOf(h, "eu-1")
		return strings.HasPrefix(s, "Unreachable: ") && strings.Contains(s, "certificate")
	})
}

func TestTakeover(t *testing.T) {
	fc := fakecluster.New(t)
	h := startHub(t, Config{Agents: testAgents("eu-1")})
	first := startAgent(t, h.url, "eu-1", fc)
	eventually(t, 5*time.Second, "the first agent connects", first.Connected)

	second := startAgent(t, h.url, "eu-1", fc)
	err := first.Wait(t, 5*time.Second)
	want := "The hub at " + h.url + " refused this agent: another agent connected as it (do two clusters use the same name and token?)."
	if err == nil || err.Error() != want {
		t.Fatalf("the first agent's Run = %v, want %q", err, want)
	}
	eventually(t, 5*time.Second, "the second agent stays connected", second.Connected)
	if got := h.counter("takeovers"); got != 1 {
		t.Errorf("takeovers = %v, want 1", got)
	}
	if !strings.Contains(h.logs.String(), `WARN  An agent was taken over by another agent with the same name and token agent="eu-1"`) ||
		!strings.Contains(h.logs.String(), "previousRemote=") {
		t.Errorf("the takeover wasn't logged as a warning with both addresses:\n%s", h.logs)
	}
	eventually(t, 5*time.Second, "the cluster is Ready through the second agent", func() bool { return statusOf(h, "eu-1") == "Ready" })
	// The first agent's connection is finished (its end is logged last),
	// and must not have marked the cluster Unreachable.
	eventually(t, 5*time.Second, "the first agent's disconnect", func() bool {
		return strings.Contains(h.logs.String(), `The agent of "eu-1" disconnected`)
	})
	if got := statusOf(h, "eu-1"); got != "Ready" {
		t.Errorf("after the takeover: %q", got)
	}
}

// TestTakeoverOfASilentAgentDoesNotWait: the agent taken over is often
// gone without a word (its pod restarted, and the hub still holds the
// connection), so its goaway waits out the linger. The new connection is
// set up meanwhile, not after: connected and probed while the old one is
// still open.
func TestTakeoverOfASilentAgentDoesNotWait(t *testing.T) {
	fc := fakecluster.New(t)
	h := startHub(t, Config{Agents: testAgents("eu-1")})
	old, _ := welcomedAgent(t, h, fc) // reads nothing more, and never closes
	eventually(t, 5*time.Second, "the first agent's connect logged", func() bool {
		return strings.Count(h.logs.String(), `The agent of "eu-1" connected`) == 1
	})

	second := startAgent(t, h.url, "eu-1", fc)
	eventually(t, 5*time.Second, "the second agent's connect logged", func() bool {
		return strings.Count(h.logs.String(), `The agent of "eu-1" connected`) == 2
	})
	select {
	case <-old.Done():
		t.Fatalf("the new connection was set up only after the old one ended:\n%s", h.logs)
	default:
	}
	closedWithin(t, old, 10*time.Second) // and the old one goes after the linger
	eventually(t, 5*time.Second, "the second agent stays connected", second.Connected)
	if got := h.counter("takeovers"); got != 1 {
		t.Errorf("takeovers = %v, want 1", got)
	}
}

// TestShutdownSendsAgentsAwayWithSpread: a stopping hub tells each agent
// to wait a random share of the spread; a spread of 0 (allowed in
// TETHER_RECONNECT_SPREAD_SECONDS) means no wait.
func TestShutdownSendsAgentsAwayWithSpread(t *testing.T) {
	for _, tc := range []struct {
		spread, want time.Duration
		log          string
	}{
		{10 * time.Second, 2500 * time.Millisecond, "Connecting again in 3 s: the hub is shutting down"},
		{0, 0, "Connecting again in 0 s: the hub is shutting down"},
	} {
		t.Run(tc.spread.String(), func(t *testing.T) {
			fc := fakecluster.New(t)
			h := startHub(t, Config{Agents: testAgents("eu-1"), ReconnectSpread: tc.spread, Random: func() float64 { return 0.25 }})
			waits := make(chan time.Duration, 10)
			a := startAgent(t, h.url, "eu-1", fc, func(c *agent.Config) {
				c.Sleep = func(ctx context.Context, d time.Duration) error {
					waits <- d
					<-ctx.Done()
					return ctx.Err()
				}
			})
			eventually(t, 5*time.Second, "connected", a.Connected)
			h.Close()
			select {
			case d := <-waits:
				if d != tc.want {
					t.Errorf("the agent waits %s before reconnecting, want the hub's %s", d, tc.want)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("the agent didn't notice the shutdown:\n%s", a.Logs)
			}
			if !strings.Contains(a.Logs.String(), tc.log) {
				t.Errorf("agent log:\n%s", a.Logs)
			}
			// The agent closes first, as asked: that is not why it went.
			if !strings.Contains(h.logs.String(), `why="the hub is shutting down"`) {
				t.Errorf("the hub logs the disconnect with another reason:\n%s", h.logs)
			}
		})
	}
}

// TestAgentWhoseHelloComesAsTheHubCloses: an agent whose upgrade the hub
// took before it began to close, and whose hello came after, is sent away
// with its share of the spread too, like those already connected.
func TestAgentWhoseHelloComesAsTheHubCloses(t *testing.T) {
	fc := fakecluster.New(t)
	h := startHub(t, Config{Agents: testAgents("eu-1"), ReconnectSpread: 10 * time.Second, Random: func() float64 { return 0.25 }})
	sess := rawAgent(t, h)
	ctl, err := sess.Open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() { h.Close(); close(closed) }() // it waits for this connection
	eventually(t, 5*time.Second, "the hub closing", func() bool {
		return h.registry.Closing()
	})
	hello := protocol.Message{Type: protocol.TypeHello, Protocol: protocol.Version, AgentVersion: "test", CACert: string(fc.CA.CertPEM),
		ServiceAccountToken: "service-account-token-1", APIServer: fc.Addr()}
	if err := protocol.Write(ctl, hello); err != nil {
		t.Fatal(err)
	}
	var got []protocol.Message
	for {
		m, err := protocol.Read(ctl)
		if err != nil {
			break
		}
		got = append(got, m)
	}
	if n := len(got); n == 0 || got[n-1].Type != protocol.TypeGoAway || got[n-1].Reason != protocol.ReasonShutdown || got[n-1].ReconnectAfterMillis != 2500 {
		t.Errorf("the agent was told %+v; want a shutdown goaway with 2500 ms to wait", got)
	}
	<-closed
}

func TestHealthz(t *testing.T) {
	fc := fakecluster.New(t)
	h := startHub(t, Config{Agents: testAgents("eu-1")})
	addr := freeAddr(t)
	a := startAgent(t, h.url, "eu-1", fc, func(c *agent.Config) { c.HealthAddr = addr })
	eventually(t, 5*time.Second, "connected", a.Connected)
	if code, body := get(t, "http://"+addr+"/healthz"); code != 200 || body != "connected\n" {
		t.Errorf("/healthz while connected = %d %q", code, body)
	}
	h.Close()
	eventually(t, 5*time.Second, "healthz says not connected", func() bool {
		code, body := get(t, "http://"+addr+"/healthz")
		return code == 503 && body == "not connected\n"
	})
}
