package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/protocol"
	"github.com/tetherhq/tether/internal/testutil/fakecluster"
	"github.com/tetherhq/tether/internal/web"
)

// TestStrictClusters: an agent in strictMode says whether its cluster's
// API server enforces the ceiling. Where it can't (before Kubernetes 1.36,
// or with constrained impersonation off), every request as a person would
// be refused: the cluster is Unreachable with why, on the card, in the API
// and in kubectl's 503. /api/clusters says for every cluster whether its
// ceiling holds (SPEC section 9).
func TestStrictClusters(t *testing.T) {
	fc := fakecluster.New(t)
	people, err := auth.New(auth.Config{Users: testUsers})
	if err != nil {
		t.Fatal(err)
	}
	defer people.Close()
	h := startHub(t, Config{Agents: testAgents("eu-1", "us-1"), Auth: people, ProbeInterval: 50 * time.Millisecond, ProbeTimeout: 200 * time.Millisecond})
	cluster := func(name string) web.ClusterJSON {
		t.Helper()
		code, body, _ := call(t, "GET", h.url+"/api/clusters/"+name, aliceToken, nil)
		var c web.ClusterJSON
		if code != http.StatusOK || json.Unmarshal([]byte(body), &c) != nil {
			t.Fatalf("/api/clusters/%s: %d %s", name, code, body)
		}
		return c
	}
	connect := func(ceiling, why string) {
		t.Helper()
		sess := rawAgent(t, h)
		ctl, err := sess.Open(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		hello := helloFor(fc)
		hello.Ceiling, hello.CeilingError = ceiling, why
		if err := protocol.Write(ctl, hello); err != nil {
			t.Fatal(err)
		}
		if m, err := protocol.Read(ctl); err != nil || m.Type != protocol.TypeWelcome {
			t.Fatalf("the hello was answered %+v, %v; want a welcome", m, err)
		}
	}

	const why = "strictMode needs constrained impersonation, Kubernetes 1.36 or later; this cluster runs 1.33"
	connect(protocol.CeilingUnavailable, why)
	eventually(t, 5*time.Second, "the cluster Unreachable with why", func() bool { return statusOf(h, "eu-1") == "Unreachable: "+why })
	if c := cluster("eu-1"); c.Status != "Unreachable" || c.Message != why || c.Ceiling != "off" {
		t.Errorf("/api/clusters/eu-1 = %s %q, ceiling %q; want Unreachable, why, off", c.Status, c.Message, c.Ceiling)
	}
	code, body, _ := call(t, "GET", h.url+"/clusters/eu-1/api", aliceToken, nil)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, why) {
		t.Errorf("a request to the cluster: %d %s; want 503 saying why", code, body)
	}
	if c := cluster("us-1"); c.Ceiling != "off" {
		t.Errorf("a cluster with no agent: ceiling %q, want off", c.Ceiling)
	}

	// The next agent says the ceiling holds: it takes over, and the
	// cluster says so.
	connect(protocol.CeilingEnforced, "")
	eventually(t, 5*time.Second, "the ceiling enforced", func() bool { return cluster("eu-1").Ceiling == "enforced" })
	// Its probes say what they find (this agent relays nothing), no
	// longer why the one before couldn't hold the ceiling.
	eventually(t, 5*time.Second, "the status from the new agent's probes", func() bool { return !strings.Contains(statusOf(h, "eu-1"), why) })
}
