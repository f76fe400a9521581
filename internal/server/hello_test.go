package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/agent"
	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/listfile"
	"github.com/tetherhq/tether/internal/protocol"
	"github.com/tetherhq/tether/internal/testutil/agenttest"
	"github.com/tetherhq/tether/internal/testutil/fakecluster"
	"github.com/tetherhq/tether/internal/tunnel"
)

// rawAgent upgrades with a good name and token and then misbehaves as told.
func rawAgent(t *testing.T, h *testHub) *tunnel.Session {
	t.Helper()
	return agenttest.Raw(t, h.url, "eu-1", testToken)
}

// goodHello is the hello a real agent of fc's cluster sends.
func goodHello(fc *fakecluster.Cluster) protocol.Message {
	return protocol.Message{Type: protocol.TypeHello, Protocol: protocol.Version, AgentVersion: "test", CACert: string(fc.CA.CertPEM),
		ServiceAccountToken: "service-account-token-1", APIServer: fc.Addr()}
}

func closedWithin(t *testing.T, sess *tunnel.Session, within time.Duration) {
	t.Helper()
	select {
	case <-sess.Done():
	case <-time.After(within):
		t.Fatalf("the hub kept the connection open past %s", within)
	}
}

func TestHelloTimeout(t *testing.T) {
	h := startHub(t, Config{Agents: testAgents("eu-1"), HelloTimeout: 300 * time.Millisecond})
	sess := rawAgent(t, h)
	closedWithin(t, sess, 5*time.Second) // no control stream at all

	sess = rawAgent(t, h)
	ctl, err := sess.Open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctl.Write([]byte{0, 0}) // half a length prefix, then nothing
	closedWithin(t, sess, 5*time.Second)
	if !strings.Contains(h.logs.String(), `An agent failed its hello agent="eu-1"`) {
		t.Errorf("hub log:\n%s", h.logs)
	}
}

func TestHelloTooLarge(t *testing.T) {
	h := startHub(t, Config{Agents: testAgents("eu-1")})
	sess := rawAgent(t, h)
	ctl, err := sess.Open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	big := protocol.MaxMessageSize + 1
	ctl.Write([]byte{byte(big >> 24), byte(big >> 16), byte(big >> 8), byte(big)})
	closedWithin(t, sess, 5*time.Second)
	if !strings.Contains(h.logs.String(), "message too large") {
		t.Errorf("hub log:\n%s", h.logs)
	}
}

// TestTokenRotation: the agent sends its service account's new token, and
// the hub's probes and the requests it relays for people both carry it.
func TestTokenRotation(t *testing.T) {
	fc := fakecluster.New(t)
	people, err := auth.New(auth.Config{Users: testUsers})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { people.Close() })
	h := startHub(t, Config{Agents: testAgents("eu-1"), Auth: people, ProbeInterval: 50 * time.Millisecond})
	a := startAgent(t, h.url, "eu-1", fc, func(c *agent.Config) { c.TokenReread = 100 * time.Millisecond })
	eventually(t, 5*time.Second, "the probe uses the first token", func() bool { return fc.LastToken() == "service-account-token-1" })
	relayedAuthorization := func() string {
		code, body, _ := call(t, "GET", h.url+"/clusters/eu-1/api", aliceToken, nil)
		var got struct{ Header http.Header }
		if err := json.Unmarshal([]byte(body), &got); code != http.StatusOK || err != nil {
			t.Fatalf("%d %v: %s", code, err, body)
		}
		return got.Header.Get("Authorization")
	}
	if got := relayedAuthorization(); got != "Bearer service-account-token-1" {
		t.Errorf("a person's request reached the API server with Authorization %q, want the first token", got)
	}
	fc.WriteToken(t, "service-account-token-2")
	// One reread interval, plus a probe interval, plus slack for a loaded
	// machine.
	eventually(t, 5*time.Second, "the hub uses the new token", func() bool { return fc.LastToken() == "service-account-token-2" })
	if got := relayedAuthorization(); got != "Bearer service-account-token-2" {
		t.Errorf("after the new token, a person's request reached the API server with Authorization %q, want the new token", got)
	}
	if !strings.Contains(a.Logs.String(), "Sent the hub the service account's new token") {
		t.Errorf("agent log:\n%s", a.Logs)
	}
	assertNoSecrets(t, h.logs.String()+a.Logs.String())
}

// TestHelloRefusedIsTriedAgain: a hello the hub refuses as bad (400) is a
// failure to connect, as SPEC section 1 has every answer but 401, 403 and
// a takeover: the agent logs the hub's reason and tries again.
func TestHelloRefusedIsTriedAgain(t *testing.T) {
	fc := fakecluster.New(t)
	h := startHub(t, Config{Agents: testAgents("eu-1")})
	a := startAgent(t, h.url, "eu-1", fc, func(c *agent.Config) {
		c.APIServer = "bad host:443"
		c.Sleep = func(ctx context.Context, d time.Duration) error {
			select {
			case <-time.After(10 * time.Millisecond):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	})
	eventually(t, 5*time.Second, "the agent tries again", func() bool {
		return strings.Count(a.Logs.String(), "it refused the hello with 400") >= 2
	})
	select {
	case <-a.Done():
		t.Fatalf("the agent stopped: %v\n%s", a.Err(), a.Logs)
	default:
	}
	if !strings.Contains(a.Logs.String(), "must be host:port") {
		t.Errorf("the agent's log doesn't give the hub's reason:\n%s", a.Logs)
	}
}

// TestHelloFromANewerProtocol: a hub refuses a hello in a protocol newer
// than its own, whose messages it could misread, and says to upgrade it.
func TestHelloFromANewerProtocol(t *testing.T) {
	fc := fakecluster.New(t)
	h := startHub(t, Config{Agents: testAgents("eu-1"), ProbeInterval: time.Hour})
	sess := rawAgent(t, h)
	ctl, err := sess.Open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	hello := protocol.Message{Type: protocol.TypeHello, Protocol: protocol.Version + 1, AgentVersion: "test", CACert: string(fc.CA.CertPEM),
		ServiceAccountToken: "service-account-token-1", APIServer: fc.Addr()}
	if err := protocol.Write(ctl, hello); err != nil {
		t.Fatal(err)
	}
	m, err := protocol.Read(ctl)
	if err != nil || m.Type != protocol.TypeRefused || m.Status != http.StatusBadRequest || !strings.Contains(m.Error, "upgrade the hub") {
		t.Fatalf("answered %+v, %v; want a 400 refusal that says to upgrade the hub", m, err)
	}
	if h.connected("eu-1") != nil {
		t.Error("the hub took the agent")
	}
}

// TestCARotation: when the cluster's ca.crt changes, the agent connects
// again with the new one in its hello, so the hub goes on reaching an API
// server whose certificate now comes from the new CA.
func TestCARotation(t *testing.T) {
	fc := fakecluster.New(t)
	h := startHub(t, Config{Agents: testAgents("eu-1"), ProbeInterval: 50 * time.Millisecond})
	a := startAgent(t, h.url, "eu-1", fc, func(c *agent.Config) { c.TokenReread = 100 * time.Millisecond })
	eventually(t, 5*time.Second, "the cluster turns Ready", func() bool { return statusOf(h, "eu-1") == "Ready" })
	fc.RotateCA(t)
	// Only a connection made since, checked against the new CA, reaches
	// the handler.
	before := fc.Count("/readyz")
	eventually(t, 5*time.Second, "probes reach the API server again", func() bool {
		return fc.Count("/readyz") >= before+2 && statusOf(h, "eu-1") == "Ready"
	})
	if !strings.Contains(a.Logs.String(), "ca.crt) changed") {
		t.Errorf("the agent didn't say why it connected again:\n%s", a.Logs)
	}
	if !strings.Contains(h.logs.String(), "sent a CA other than last time") {
		t.Errorf("the hub didn't warn of the new CA:\n%s", h.logs)
	}
	assertNoSecrets(t, h.logs.String()+a.Logs.String())
}

// TestTokenRevokedDuringTheHandshake: an agent whose token was checked at the
// upgrade, and whose hello comes after the agents list revoked that token
// (a reload while the handshake was open, up to HelloTimeout), must not
// stay connected: AgentsChanged dropped the agents connected then, and
// this one wasn't yet.
func TestTokenRevokedDuringTheHandshake(t *testing.T) {
	fc := fakecluster.New(t)
	list := testAgents("eu-1")
	h := startHub(t, Config{Agents: list, ProbeInterval: time.Hour})
	sess := rawAgent(t, h) // authenticated with testToken
	ctl, err := sess.Open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The list reloads: eu-1's token is rotated away.
	change := list.Replace([]fleet.Agent{{Name: "eu-1", TokenHashes: []listfile.Hash{listfile.HashToken("another-token-of-at-least-32-characters")}, Groups: fleet.Groups{Everyone: true}}})
	if len(change.TokensRevoked) != 1 {
		t.Fatalf("change %+v, want eu-1's token revoked", change)
	}
	h.AgentsChanged(change)
	if err := protocol.Write(ctl, goodHello(fc)); err != nil {
		t.Fatal(err)
	}
	m, err := protocol.Read(ctl)
	if err != nil || m.Type != protocol.TypeRefused || m.Status != http.StatusUnauthorized {
		t.Errorf("the hello of an agent whose token was revoked during its handshake was answered %+v, %v; want a refusal, 401", m, err)
	}
	if c := h.connected("eu-1"); c != nil {
		t.Errorf("an agent whose token was revoked during its handshake is connected")
	}
}

// TestRotationKeepsTheAgentOnTheNewToken: SPEC section 2 takes two
// tokenSha256 "so a token can be rotated without downtime". Once the agent
// runs with the new token, removing the old one from the list must not
// disconnect it (which ends every exec, port-forward and watch through it).
func TestRotationKeepsTheAgentOnTheNewToken(t *testing.T) {
	fc := fakecluster.New(t)
	oldHash := listfile.HashToken("the-old-token-of-at-least-32-characters")
	entry := func(hashes ...listfile.Hash) []fleet.Agent {
		return []fleet.Agent{{Name: "eu-1", TokenHashes: hashes, Groups: fleet.Groups{Everyone: true}}}
	}
	list := fleet.New(entry(oldHash, listfile.HashToken(testToken)))
	h := startHub(t, Config{Agents: list})
	a := startAgent(t, h.url, "eu-1", fc) // with testToken, the new one
	eventually(t, 5*time.Second, "connected", a.Connected)
	conn := h.connected("eu-1")
	h.AgentsChanged(list.Replace(entry(listfile.HashToken(testToken)))) // the old token's hash goes
	time.Sleep(time.Second)
	if h.connected("eu-1") != conn {
		t.Errorf("removing the old token's hash disconnected the agent that uses the new one:\n%s", h.logs)
	}
}
