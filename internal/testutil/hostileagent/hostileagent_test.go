package hostileagent_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/hub"
	"github.com/tetherhq/tether/internal/listfile"
	"github.com/tetherhq/tether/internal/protocol"
	"github.com/tetherhq/tether/internal/testutil/hostileagent"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const token = "0123456789abcdef0123456789abcdef-hostile"

// TestTheHubTakesItForAnAgent: a real hub welcomes the hostile agent, takes
// its inventory, keeps it connected through heartbeats, answers a dial error
// with it, and Close leaves nothing running.
func TestTheHubTakesItForAnAgent(t *testing.T) {
	h, err := hub.New(hub.Config{
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
		Agents:        fleet.New([]fleet.Agent{{Name: "c", TokenHashes: []listfile.Hash{listfile.HashToken(token)}, Groups: fleet.Groups{Everyone: true}}}),
		Heartbeat:     100 * time.Millisecond,
		ProbeInterval: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(h.ServeAgent))
	defer func() { srv.Config.Shutdown(context.Background()); h.Close(); srv.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if _, err := hostileagent.Dial(ctx, hostileagent.Config{HubURL: srv.URL, Name: "c", Token: strings.Repeat("x", 40)}); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("a wrong token: %v; want the upgrade's 401", err)
	}
	a, err := hostileagent.Dial(ctx, hostileagent.Config{HubURL: srv.URL, Name: "c", Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.Welcome.HeartbeatMillis != 100 {
		t.Errorf("welcome: %+v", a.Welcome)
	}
	a.HandleStreams(hostileagent.DialError("no API server here"))
	inv, err := a.OpenInventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = inv.Send(&protocol.Update{Snapshot: true, Complete: true, Kinds: []protocol.KindState{{Kind: "pods"}},
		Upserts: []protocol.Resource{{ResourceRef: protocol.ResourceRef{Kind: "pods", Namespace: "a", Name: "forged"}}}})
	if err != nil {
		t.Fatal(err)
	}
	// The hub hears it past its silence limit (2 heartbeats and a
	// second): it answers the pings. Its probes fail with the dial error.
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, _ := h.Cluster("c")
		if !st.ConnectedSince.IsZero() && st.LastSeen.Sub(st.ConnectedSince) > 1500*time.Millisecond && strings.Contains(st.Message, "no API server here") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20 s: %+v", st)
		}
		select {
		case <-a.Done():
			t.Fatal("the hub ended the connection")
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err := a.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	a.Close()
}
