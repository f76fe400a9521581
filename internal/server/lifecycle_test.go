package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/kubeproxy"
	"github.com/tetherhq/tether/internal/listfile"
	"github.com/tetherhq/tether/internal/logging"
	"github.com/tetherhq/tether/internal/protocol"
	"github.com/tetherhq/tether/internal/testutil/fakecluster"
	"github.com/tetherhq/tether/internal/testutil/syncbuf"
	"github.com/tetherhq/tether/internal/tunnel"
)

// helloFor is the hello of an agent of cluster fc.
func helloFor(fc *fakecluster.Cluster) protocol.Message {
	return protocol.Message{Type: protocol.TypeHello, Protocol: protocol.Version, AgentVersion: "test", CACert: string(fc.CA.CertPEM),
		ServiceAccountToken: "service-account-token-1", APIServer: fc.Addr()}
}

// welcomedAgent is rawAgent, as eu-1, through its hello and welcome.
func welcomedAgent(t *testing.T, h *testHub, fc *fakecluster.Cluster) (*tunnel.Session, net.Conn) {
	t.Helper()
	sess := rawAgent(t, h)
	ctl, err := sess.Open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := protocol.Write(ctl, helloFor(fc)); err != nil {
		t.Fatal(err)
	}
	if m, err := protocol.Read(ctl); err != nil || m.Type != protocol.TypeWelcome {
		t.Fatalf("the hello was answered %+v, %v; want a welcome", m, err)
	}
	return sess, ctl
}

// TestRemovedClusterKeepsNoInventorySentAsItLeft: a reload that removes a
// cluster forgets its inventory, then sends its agent away, which takes up
// to the goaway's linger. An inventory stream the agent opens meanwhile
// (as it does right after connecting, or again after one broke) must not
// leave the removed cluster's inventory in the hub once the agent is gone:
// nothing would ever drop it, and a name listed again would show it.
func TestRemovedClusterKeepsNoInventorySentAsItLeft(t *testing.T) {
	fc := fakecluster.New(t)
	list := testAgents("eu-1", "us-1")
	h := startHub(t, Config{Agents: list, Heartbeat: time.Minute, ProbeInterval: time.Hour})
	sess, ctl := welcomedAgent(t, h, fc)

	changed := make(chan struct{})
	go func() {
		defer close(changed)
		h.AgentsChanged(list.Replace([]fleet.Agent{{Name: "us-1", TokenHashes: []listfile.Hash{listfile.HashToken(testToken)}}}))
	}()
	// The goaway comes once the hub has forgotten eu-1's inventory.
	if m, err := protocol.Read(ctl); err != nil || m.Type != protocol.TypeGoAway {
		t.Fatalf("read %+v, %v; want a goaway", m, err)
	}
	st, err := sess.Open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	snapshot := &protocol.Update{Snapshot: true, Complete: true, Kinds: []protocol.KindState{{Kind: "nodes"}},
		Upserts: []protocol.Resource{{ResourceRef: protocol.ResourceRef{Kind: "nodes", Name: "node-1"}, Ready: true}}}
	if err := protocol.WriteUpdate(st, snapshot); err != nil {
		t.Fatal(err)
	}
	applied := false
	eventually(t, 10*time.Second, "the snapshot is taken, or the agent sent away", func() bool {
		_, applied = h.inventory.Info("eu-1")
		return applied || h.connected("eu-1") == nil
	})
	if !applied {
		t.Skip("the hub closed the connection before the snapshot came: nothing to check")
	}
	sess.Close() // the agent goes, as the goaway asked
	<-changed
	eventually(t, 10*time.Second, "the agent is gone", func() bool { return h.connected("eu-1") == nil })
	if _, ok := h.inventory.Info("eu-1"); ok {
		t.Error("the inventory of a cluster removed from the agents list is still kept after its agent left")
	}
}

// newFloodCluster is an API server whose /flood switches protocols and
// then sends without end, as `kubectl exec -- cat` of a large file does;
// sent counts what it wrote.
func newFloodCluster(t *testing.T, sent *atomic.Int64) *fakecluster.Cluster {
	t.Helper()
	ca, cert := fakecluster.NewCA(t, "flood cluster CA")
	fc := &fakecluster.Cluster{CA: ca, SADir: t.TempDir(), Paths: map[string]int{}, Conns: map[string]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	mux.HandleFunc("/version", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"major":"1","minor":"36","gitVersion":"v1.36.3-test"}`))
	})
	mux.HandleFunc("/flood", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "Upgrade")
		w.Header().Set("Upgrade", "flood")
		w.WriteHeader(http.StatusSwitchingProtocols)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		chunk := make([]byte, 32<<10)
		for {
			n, err := conn.Write(chunk)
			sent.Add(int64(n))
			if err != nil {
				return
			}
		}
	})
	fc.Srv = httptest.NewUnstartedServer(mux)
	fc.Srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	fc.Srv.StartTLS()
	t.Cleanup(fc.Srv.Close)
	fc.WriteToken(t, "service-account-token-1")
	writeFile(t, filepath.Join(fc.SADir, "ca.crt"), ca.CertPEM)
	return fc
}

// TestShutdownClosesStalledSessionsAndAuditsThem: once the grace is over,
// a stopping hub says it closes the requests still open, and Serve must
// not return before their audit lines are written: after it returns, the
// audit file is closed and a line is lost. An upgraded session whose
// client has stopped reading (a laptop gone to sleep mid `kubectl exec --
// cat`) is not ended by the agent's tunnel closing: the copy to the client
// waits on the client's socket, and the http.Server doesn't track a
// hijacked connection, so nothing closed it.
func TestShutdownClosesStalledSessionsAndAuditsThem(t *testing.T) {
	var sent atomic.Int64
	fc := newFloodCluster(t, &sent)
	opts := optionsOn(t, map[string]string{
		"TETHER_PUBLIC_URL":             "http://hub.example.com",
		"TETHER_METRICS_ADDR":           "0",
		"TETHER_USERS":                  "- {name: ann, token: " + annToken + "}\n",
		"TETHER_FLEET_AGENTS":           "- {name: eu-1, token: " + testToken + "}\n",
		"TETHER_SHUTDOWN_GRACE_SECONDS": "0",
	})
	opts.AuditFile = filepath.Join(t.TempDir(), "audit")
	addr := opts.Listener.Addr().String()
	log, _ := logging.New("text", &syncbuf.Buffer{}, slog.LevelError)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, opts, log, nil) }()
	a := startAgent(t, "http://"+addr, "eu-1", fc)
	eventually(t, 5*time.Second, "connected", a.Connected)

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /clusters/eu-1/flood HTTP/1.1\r\nHost: hub\r\nAuthorization: Bearer %s\r\nConnection: Upgrade\r\nUpgrade: flood\r\n\r\n", annToken)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("the upgrade: %v, %v", resp, err)
	}
	// The client reads no more: wait until everything on the way is full
	// and the API server can send no more.
	last := int64(-1)
	eventually(t, 20*time.Second, "the session stalls", func() bool {
		time.Sleep(200 * time.Millisecond)
		n := sent.Load()
		stalled := n == last && n > 0
		last = n
		return stalled
	})

	stop() // as SIGTERM does; the grace is 0
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Serve didn't return")
	}
	b, err := os.ReadFile(opts.AuditFile)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for l := range strings.Lines(string(b)) {
		var rec kubeproxy.AuditRecord
		if json.Unmarshal([]byte(l), &rec) == nil && rec.Path == "/flood" {
			found = true
		}
	}
	if !found {
		t.Errorf("Serve returned before the audit line of the session it cut was written; audit:\n%s", b)
	}
}
