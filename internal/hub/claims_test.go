package hub

import (
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/protocol"
	"github.com/tetherhq/tether/internal/testutil/fakecluster"
)

// claimUpstream is the Upstream of another replica's claim in these tests:
// only its name matters.
type claimUpstream struct{ Upstream }

func (claimUpstream) Cluster() string { return "eu-1" }

func TestAClaimRoutesAndShowsTheCluster(t *testing.T) {
	h := startHub(t, Config{Agents: testAgents("eu-1"), Replica: "hub-a"})
	if h.Reach("eu-1") != nil {
		t.Fatal("Reach found a cluster no agent holds")
	}
	sub := h.Subscribe()
	defer sub.Close()
	since := time.Now().Add(-time.Minute)
	up := claimUpstream{}
	h.SetClaim("hub-b", "eu-1", &Claim{Since: since, Upstream: up,
		Status:  ClusterStatus{Status: Ready, KubernetesVersion: "v1.36.3", ConnectedSince: since},
		History: []StatusChange{{Time: since, Status: Ready}}})
	if got := h.Reach("eu-1"); got != up {
		t.Errorf("Reach = %v, want the claim's upstream", got)
	}
	if got := statusOf(h, "eu-1"); got != Ready {
		t.Errorf("status = %q, want the holder's Ready", got)
	}
	if got := h.History("eu-1"); len(got) != 1 || got[0].Status != Ready {
		t.Errorf("History = %v, want the holder's", got)
	}
	if names, _ := sub.Take(); len(names) != 1 || names[0] != "eu-1" {
		t.Errorf("subscribers were told %v, want eu-1", names)
	}
	if _, held := h.Held("eu-1"); held {
		t.Error("Held reports a cluster another replica holds")
	}
	if h.Local("eu-1") != nil {
		t.Error("Local returns another replica's cluster")
	}
	h.ForgetReplica("hub-b")
	if h.Reach("eu-1") != nil {
		t.Error("Reach still routes to a replica that is gone")
	}
	if got := statusOf(h, "eu-1"); got != Unreachable+": "+MessageNotConnected {
		t.Errorf("status once the holder is gone = %q", got)
	}
}

// TestANewerClaimTakesOver: newest wins wherever the two agents landed. An
// agent connected here is told it was taken over when another replica
// says an agent of its cluster connected there later, and keeps its place
// against a claim older than itself.
func TestANewerClaimTakesOver(t *testing.T) {
	fc := fakecluster.New(t)
	h := startHub(t, Config{Agents: testAgents("eu-1"), Replica: "hub-a"})
	a := startAgent(t, h.url, "eu-1", fc)
	eventually(t, 5*time.Second, "connected", a.Connected)
	held, ok := h.Held("eu-1")
	if !ok || held.Replica != "hub-a" || held.Since.IsZero() {
		t.Fatalf("Held = %+v, %v", held, ok)
	}

	h.SetClaim("hub-b", "eu-1", &Claim{Since: held.Since.Add(-time.Second), Upstream: claimUpstream{}})
	if got := h.Reach("eu-1"); got == nil || got.Host() != APIServerName {
		t.Errorf("with an older claim elsewhere, Reach = %v, want the agent connected here", got)
	}
	if a.Err() != nil {
		t.Fatalf("an older claim stopped the agent: %v", a.Err())
	}

	h.SetClaim("hub-b", "eu-1", &Claim{Since: held.Since.Add(time.Second), Upstream: claimUpstream{}})
	err := a.Wait(t, 5*time.Second)
	if err == nil || !strings.Contains(err.Error(), "another agent connected as it") {
		t.Fatalf("agent ended with %v, want a takeover", err)
	}
	eventually(t, 5*time.Second, "the agent taken over is gone", func() bool { return h.Local("eu-1") == nil })
	if got := h.Reach("eu-1"); got == nil || got.Cluster() != "eu-1" {
		t.Errorf("Reach = %v, want the newer claim's upstream", got)
	}
	if !strings.Contains(h.logs.String(), `An agent was taken over by another agent with the same name and token agent="eu-1" replica=hub-b`) {
		t.Errorf("hub log:\n%s", h.logs)
	}
}

// TestClaimsOfOneAgentFollowItsConnections: two connections of one agent
// process are ordered by its count of connections, not by the clocks of
// the replicas they reached: an agent that came back to another replica
// whose clock is behind is not told it was taken over, and the connection
// it left is.
func TestClaimsOfOneAgentFollowItsConnections(t *testing.T) {
	fc := fakecluster.New(t)
	h := startHub(t, Config{Agents: testAgents("eu-1", "us-1"), Replica: "hub-a", Heartbeat: time.Hour, ProbeInterval: time.Hour})
	hello := helloFor(fc)
	hello.Instance, hello.Connection = "agent-1", 4
	left := helloWith(t, h, "eu-1", hello)
	eventually(t, 5*time.Second, "registered", func() bool { return h.Local("eu-1") != nil })

	// Its next connection, on a replica whose clock is a minute behind.
	h.SetClaim("hub-b", "eu-1", &Claim{Since: time.Now().Add(-time.Minute), Instance: "agent-1", Connection: 5, Upstream: claimUpstream{}})
	if m, err := nextMessage(left); err != nil || m.Type != protocol.TypeGoAway || m.Reason != protocol.ReasonTakeover {
		t.Errorf("the connection the agent left got %+v, %v; want a takeover", m, err)
	}

	// An older connection of another agent's, claimed later, takes
	// nothing over.
	hello.Instance, hello.Connection = "agent-2", 9
	kept := helloWith(t, h, "us-1", hello)
	defer kept.Close()
	eventually(t, 5*time.Second, "registered", func() bool { return h.Local("us-1") != nil })
	h.SetClaim("hub-b", "us-1", &Claim{Since: time.Now().Add(time.Minute), Instance: "agent-2", Connection: 8, Upstream: claimUpstream{}})
	if h.Local("us-1") == nil {
		t.Error("an earlier connection of the same agent took the later one over")
	}
}

// namedUpstream is a claim's upstream that tests tell apart by name.
type namedUpstream struct {
	claimUpstream
	name string
}

// TestTwoReplicasClaimingOneCluster: while two replicas claim a cluster
// (an agent moving, say), the newer claim routes; a replica's next claim
// replaces its last, and when the newer goes the other routes again.
func TestTwoReplicasClaimingOneCluster(t *testing.T) {
	h := startHub(t, Config{Agents: testAgents("eu-1"), Replica: "hub-a"})
	now := time.Now()
	b1, b2, c := namedUpstream{name: "b1"}, namedUpstream{name: "b2"}, namedUpstream{name: "c"}
	h.SetClaim("hub-b", "eu-1", &Claim{Since: now.Add(-time.Hour), Upstream: b1})
	h.SetClaim("hub-c", "eu-1", &Claim{Since: now.Add(-time.Minute), Upstream: c})
	if got := h.Reach("eu-1"); got != c {
		t.Errorf("Reach = %v, want hub-c's newer claim", got)
	}
	h.SetClaim("hub-b", "eu-1", &Claim{Since: now, Upstream: b2})
	if got := h.Reach("eu-1"); got != b2 {
		t.Errorf("Reach = %v, want hub-b's claim that replaced its last", got)
	}
	h.SetClaim("hub-b", "eu-1", nil)
	if got := h.Reach("eu-1"); got != c {
		t.Errorf("Reach once hub-b let go = %v, want hub-c's (hub-b's first claim replaced, not kept)", got)
	}
	h.ForgetReplica("hub-c")
	if got := h.Reach("eu-1"); got != nil {
		t.Errorf("Reach with no claim left = %v", got)
	}
}
