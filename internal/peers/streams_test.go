package peers

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/hub"
	"github.com/tetherhq/tether/internal/testutil/agenttest"
	"github.com/tetherhq/tether/internal/testutil/fakecluster"
)

// TestSplicedStreamsCountAgainstTheAgentsBound: a stream spliced for
// another replica counts against the agent's MaxStreamsPerAgent on the
// holder, as one of its own: past it the replica that asked gets the
// holder's refusal, naming the bound; the hub's own requests still go, on
// the streams kept for them.
func TestSplicedStreamsCountAgainstTheAgentsBound(t *testing.T) {
	fc := fakecluster.New(t)
	rs := startReplicasWith(t, replicaOptions{maxStreams: 1}, "hub-a", "hub-b")
	agenttest.Start(t, rs[0].url, "eu-1", testToken, fc.SADir, fc.Addr())
	eventually(t, 5*time.Second, "b reaches eu-1", func() bool { return rs[1].hub.Reach("eu-1") != nil })
	up := rs[1].hub.Reach("eu-1")

	held := upgrade(t, up)
	defer held.Close()
	req, _ := http.NewRequest(http.MethodGet, "https://"+up.Host()+"/x", nil)
	req.Header.Set("Authorization", up.ServiceAccountAuth())
	resp, err := up.RoundTrip(req)
	var limit *hub.StreamLimitError
	if !errors.As(err, &limit) || limit.Limit() != 1 {
		if resp != nil {
			resp.Body.Close()
		}
		t.Fatalf("a second stream past the bound of 1: %v, %v; want the holder's StreamLimitError", resp, err)
	}

	own, _ := http.NewRequestWithContext(hub.OwnRequest(context.Background()), http.MethodGet, "https://"+up.Host()+"/x", nil)
	own.Header.Set("Authorization", up.ServiceAccountAuth())
	resp, err = up.RoundTrip(own)
	if err != nil {
		t.Fatalf("the hub's own request at the people's bound: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("the hub's own request at the people's bound: %s", resp.Status)
	}
}

// TestAReplicaWithoutStreamsGetsRequestsOverHTTP: a holder of the version
// before spliced streams (a rolling update from it) has no such path: the
// replica that received a request sends it to the holder's forwarder, as
// that version did, upgrades included.
func TestAReplicaWithoutStreamsGetsRequestsOverHTTP(t *testing.T) {
	fc := fakecluster.New(t)
	before := func(p *Peers) http.Handler {
		h := p.Handler()
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasPrefix(r.URL.Path, streamsPath) || strings.HasPrefix(r.URL.Path, credentialsPath) {
				http.NotFound(w, r)
				return
			}
			h.ServeHTTP(w, r)
		})
	}
	rs := startReplicasWith(t, replicaOptions{peerHandler: before}, "hub-a", "hub-b")
	agenttest.Start(t, rs[0].url, "eu-1", testToken, fc.SADir, fc.Addr())
	eventually(t, 5*time.Second, "b reaches eu-1", func() bool { return rs[1].hub.Reach("eu-1") != nil })
	up := rs[1].hub.Reach("eu-1")

	resp := get(t, up, "/x", "", nil)
	resp.Body.Close()
	sa, _ := os.ReadFile(filepath.Join(fc.SADir, "token"))
	if resp.StatusCode != http.StatusOK || fc.LastToken() != strings.TrimSpace(string(sa)) {
		t.Errorf("through a holder without streams: %s, token %q", resp.Status, fc.LastToken())
	}
	rs[1].peers.mu.Lock()
	l := rs[1].peers.links["hub-a"]
	rs[1].peers.mu.Unlock()
	if !l.noStreams.Load() {
		t.Errorf("b went on asking a for streams it has none of")
	}
	echoes(t, up)
}

// echoes checks that an upgraded connection through up carries a line
// both ways.
func echoes(t *testing.T, up hub.Upstream) {
	t.Helper()
	rw := upgrade(t, up)
	defer rw.Close()
	rw.Write([]byte("hello\n"))
	if line, err := bufio.NewReader(rw).ReadString('\n'); line != "hello\n" {
		t.Errorf("the upgraded connection echoed %q, %v", line, err)
	}
}

// upgrade opens an upgraded connection to the fake cluster's echo through
// up.
func upgrade(t *testing.T, up hub.Upstream) io.ReadWriteCloser {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "https://"+up.Host()+"/echo-upgrade", nil)
	req.Header.Set("Authorization", up.ServiceAccountAuth())
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "echo")
	resp, err := up.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	return resp.Body.(io.ReadWriteCloser)
}
