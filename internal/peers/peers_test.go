package peers

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"go.uber.org/goleak"

	"github.com/tetherhq/tether/internal/agent"
	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/hub"
	"github.com/tetherhq/tether/internal/listfile"
	"github.com/tetherhq/tether/internal/logging"
	"github.com/tetherhq/tether/internal/protocol"
	"github.com/tetherhq/tether/internal/testutil/agenttest"
	"github.com/tetherhq/tether/internal/testutil/fakecluster"
	"github.com/tetherhq/tether/internal/testutil/faultproxy"
	"github.com/tetherhq/tether/internal/testutil/syncbuf"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testToken = "0123456789abcdef0123456789abcdef-agent-token"

// members is a Membership of replicas known from the start, each with a
// self-signed certificate, as internal/replicas gives them from their
// Leases.
type members struct {
	self   string
	all    *fleetOfReplicas
	change chan struct{}
}

type fleetOfReplicas struct {
	mu    sync.Mutex
	addrs map[string]string
	certs map[string]tls.Certificate
}

func (m *members) Self() string { return m.self }

func (m *members) Peers() []Peer {
	m.all.mu.Lock()
	defer m.all.mu.Unlock()
	var out []Peer
	for n, a := range m.all.addrs {
		if n != m.self && a != "" {
			out = append(out, Peer{Name: n, Addr: a})
		}
	}
	return out
}

func (m *members) Changed() <-chan struct{} { return m.change }

func (m *members) cert(name string) (tls.Certificate, bool) {
	m.all.mu.Lock()
	defer m.all.mu.Unlock()
	c, ok := m.all.certs[name]
	return c, ok && m.all.addrs[name] != ""
}

func (m *members) ServerTLS() *tls.Config {
	own, _ := m.cert(m.self)
	return &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{own}, ClientAuth: tls.RequireAnyClientCert,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			for _, p := range m.Peers() {
				if c, ok := m.cert(p.Name); ok && len(raw) > 0 && bytes.Equal(raw[0], c.Certificate[0]) {
					return nil
				}
			}
			return errors.New("not a replica")
		}}
}

func (m *members) ClientTLS(name string) *tls.Config {
	own, _ := m.cert(m.self)
	return &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{own}, InsecureSkipVerify: true,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if c, ok := m.cert(name); ok && len(raw) > 0 && bytes.Equal(raw[0], c.Certificate[0]) {
				return nil
			}
			return errors.New("not replica " + name)
		}}
}

func selfSigned(t *testing.T, name string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	tmpl.Subject.CommonName = name
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// replica is a registry with its peers, an agents' address and a peer
// port, as one `tether hub` of several has.
type replica struct {
	name  string
	hub   *hub.Hub
	peers *Peers
	url   string // where agents connect
	logs  *syncbuf.Buffer
	peer  *http.Server
	// members is its view of the replicas: a test may move one.
	members *members
}

func startReplicas(t *testing.T, names ...string) []*replica {
	t.Helper()
	return startReplicasWith(t, replicaOptions{}, names...)
}

// replicaOptions change what startReplicasWith starts.
type replicaOptions struct {
	maxStreams int      // the hub's MaxStreamsPerAgent; 0 for the default
	agents     []string // the agents list's names; none for eu-1 alone
	// peerHandler, if set, serves the peer port in place of Handler.
	peerHandler func(*Peers) http.Handler
}

func startReplicasWith(t *testing.T, o replicaOptions, names ...string) []*replica {
	t.Helper()
	f := &fleetOfReplicas{addrs: map[string]string{}, certs: map[string]tls.Certificate{}}
	var rs []*replica
	var changes []chan struct{}
	for _, n := range names {
		f.certs[n] = selfSigned(t, n)
	}
	for _, n := range names {
		logs := &syncbuf.Buffer{}
		log := slog.New(logging.NewTextHandler(logs, nil))
		listed := o.agents
		if len(listed) == 0 {
			listed = []string{"eu-1"}
		}
		h, err := hub.New(hub.Config{Logger: log, Agents: testAgents(listed...), Replica: n, Heartbeat: time.Second, ProbeInterval: 200 * time.Millisecond,
			MaxStreamsPerAgent: o.maxStreams})
		if err != nil {
			t.Fatal(err)
		}
		agents := httptest.NewServer(http.HandlerFunc(h.ServeAgent))
		ch := make(chan struct{}, 1)
		changes = append(changes, ch)
		m := &members{self: n, all: f, change: ch}
		p := New(Config{Logger: log, Hub: h, Members: m, Ping: 200 * time.Millisecond})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		handler := p.Handler()
		if o.peerHandler != nil {
			handler = o.peerHandler(p)
		}
		srv := p.Server(handler)
		go srv.ServeTLS(ln, "", "")
		r := &replica{name: n, hub: h, peers: p, url: agents.URL, logs: logs, peer: srv, members: m}
		f.mu.Lock()
		f.addrs[n] = ln.Addr().String()
		f.mu.Unlock()
		rs = append(rs, r)
		t.Cleanup(func() {
			srv.Close()
			p.Close()
			agents.Config.Shutdown(context.Background())
			h.Close()
			agents.Close()
			if t.Failed() {
				t.Logf("log of replica %s:\n%s", n, logs)
			}
		})
	}
	for _, ch := range changes {
		ch <- struct{}{}
	}
	return rs
}

// stop takes r's peer port away, as a replica killed would go.
func (r *replica) stop() {
	r.peer.Close()
	r.peers.Close()
}

func testAgents(names ...string) *fleet.Agents {
	var list []fleet.Agent
	for _, n := range names {
		list = append(list, fleet.Agent{Name: n, TokenHashes: []listfile.Hash{listfile.HashToken(testToken)}, Groups: fleet.Groups{Everyone: true}})
	}
	return fleet.New(list)
}

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

func statusOf(h *hub.Hub, name string) string {
	st, ok := h.Cluster(name)
	if !ok {
		return "unknown"
	}
	return st.String()
}

// get sends a request through up as kubeproxy would, with the service
// account's placeholder unless auth says otherwise.
func get(t *testing.T, up hub.Upstream, path, auth string, header http.Header) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "https://"+up.Host()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if auth == "" {
		auth = up.ServiceAccountAuth()
	}
	req.Header.Set("Authorization", auth)
	resp, err := up.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestAReplicaReachesAClusterAnotherHolds(t *testing.T) {
	fc := fakecluster.New(t)
	rs := startReplicas(t, "hub-a", "hub-b")
	a, b := rs[0], rs[1]
	ag := agenttest.Start(t, a.url, "eu-1", testToken, fc.SADir, fc.Addr())
	eventually(t, 5*time.Second, "replica b sees eu-1 Ready through replica a", func() bool {
		return statusOf(b.hub, "eu-1") == hub.Ready
	})
	up := b.hub.Reach("eu-1")
	if up == nil || up.Replica() != "hub-a" {
		t.Fatalf("Reach on b = %v, want the way through hub-a", up)
	}
	if h := b.hub.History("eu-1"); len(h) == 0 || h[0].Status != hub.Ready {
		t.Errorf("b's history of eu-1 = %v, want a's, Ready last", h)
	}
	// What a keeps of the inventory as a whole (the fleet page's summary,
	// the kinds' states) b shows too.
	u := &protocol.Update{Snapshot: true, Complete: true, Kinds: []protocol.KindState{{Kind: "nodes"}, {Kind: "pods"}}, Upserts: []protocol.Resource{
		{ResourceRef: protocol.ResourceRef{Kind: "nodes", Name: "n1"}, Ready: true},
		{ResourceRef: protocol.ResourceRef{Kind: "pods", Namespace: "x", Name: "p1"}}}}
	if a.hub.Inventory().Receiver("eu-1").Apply(u, time.Now()) {
		a.hub.Changed("eu-1")
	}
	eventually(t, 5*time.Second, "b has a's account of eu-1's inventory", func() bool {
		theirs, ok := b.hub.InventoryInfo("eu-1")
		s := theirs.Summary
		return ok && s.NodesTotal != nil && *s.NodesTotal == 1 && s.PodsNotReady != nil && *s.PodsNotReady == 1
	})

	// A request as a person, impersonating, goes as the agent's service
	// account, which b asked a for.
	resp := get(t, up, "/x/a%2Fb?q=1", "", http.Header{"Impersonate-User": {"alice"}})
	var seen struct {
		Path   string
		Header http.Header
	}
	json.NewDecoder(resp.Body).Decode(&seen)
	resp.Body.Close()
	sa, _ := os.ReadFile(filepath.Join(fc.SADir, "token"))
	if resp.StatusCode != http.StatusOK || seen.Path != "/x/a%2Fb?q=1" || seen.Header.Get("Impersonate-User") != "alice" ||
		seen.Header.Get("Authorization") != "Bearer "+strings.TrimSpace(string(sa)) {
		t.Errorf("the API server got %d %+v", resp.StatusCode, seen)
	}
	for k := range seen.Header {
		if strings.HasPrefix(k, "Tether-Peer") {
			t.Errorf("a peer header reached the API server: %s", k)
		}
	}

	// An upgrade is spliced both ways.
	echoes(t, up)

	// The agent gone, its cluster is Unreachable everywhere, and routes
	// nowhere.
	ag.Stop(t)
	eventually(t, 5*time.Second, "replica b drops the claim", func() bool { return b.hub.Reach("eu-1") == nil })
	if got := statusOf(b.hub, "eu-1"); got != hub.Unreachable+": "+hub.MessageNotConnected {
		t.Errorf("b's status of eu-1 = %q", got)
	}
}

// TestAPersonCantBorrowTheServiceAccount: a person's own request (a
// forwardToken cluster's, with their bearer token) that names the peer
// header asking for the agent's service account goes with their token all
// the same.
func TestAPersonCantBorrowTheServiceAccount(t *testing.T) {
	fc := fakecluster.New(t)
	rs := startReplicas(t, "hub-a", "hub-b")
	agenttest.Start(t, rs[0].url, "eu-1", testToken, fc.SADir, fc.Addr())
	eventually(t, 5*time.Second, "b reaches eu-1", func() bool { return rs[1].hub.Reach("eu-1") != nil })
	resp := get(t, rs[1].hub.Reach("eu-1"), "/who", "Bearer person-token",
		http.Header{"Tether-Peer-Service-Account": {"1"}, "tether-peer-own": {"1"}})
	resp.Body.Close()
	if got := fc.LastToken(); got != "person-token" {
		t.Errorf("the API server got token %q, want the person's", got)
	}
}

// TestTakeoverAcrossReplicas: the newest agent wins wherever it landed;
// the older one is told it was taken over, and stops.
func TestTakeoverAcrossReplicas(t *testing.T) {
	fc := fakecluster.New(t)
	rs := startReplicas(t, "hub-a", "hub-b")
	first := agenttest.Start(t, rs[0].url, "eu-1", testToken, fc.SADir, fc.Addr())
	eventually(t, 5*time.Second, "b knows a holds eu-1", func() bool { return rs[1].hub.Reach("eu-1") != nil })
	agenttest.Start(t, rs[1].url, "eu-1", testToken, fc.SADir, fc.Addr())
	err := first.Wait(t, 5*time.Second)
	if err == nil || !strings.Contains(err.Error(), "another agent connected as it") {
		t.Fatalf("the first agent ended with %v, want a takeover", err)
	}
	eventually(t, 5*time.Second, "a routes eu-1 to b", func() bool {
		up := rs[0].hub.Reach("eu-1")
		return up != nil && up.Replica() == "hub-b"
	})
}

// TestAReplicaGoneDropsItsClaims: once a replica's claims stream ends,
// its clusters route nowhere, rather than to a replica that can't answer.
func TestAReplicaGoneDropsItsClaims(t *testing.T) {
	fc := fakecluster.New(t)
	rs := startReplicas(t, "hub-a", "hub-b")
	agenttest.Start(t, rs[0].url, "eu-1", testToken, fc.SADir, fc.Addr())
	eventually(t, 5*time.Second, "b reaches eu-1", func() bool { return rs[1].hub.Reach("eu-1") != nil })
	rs[0].stop()
	eventually(t, 5*time.Second, "b drops a's claims", func() bool { return rs[1].hub.Reach("eu-1") == nil })
}

// TestASilentReplicaDropsItsClaims: a replica whose network goes silent
// (nothing closes, nothing comes) is given up after three pings of its
// claims stream, and its clusters are unreachable here until their agents
// connect elsewhere.
func TestASilentReplicaDropsItsClaims(t *testing.T) {
	fc := fakecluster.New(t)
	rs := startReplicas(t, "hub-a", "hub-b")
	a, b := rs[0], rs[1]
	a.members.all.mu.Lock()
	proxy, err := faultproxy.New(a.members.all.addrs["hub-a"])
	if err != nil {
		a.members.all.mu.Unlock()
		t.Fatal(err)
	}
	a.members.all.addrs["hub-a"] = proxy.Addr() // b reaches a through it from now on
	a.members.all.mu.Unlock()
	t.Cleanup(func() { proxy.Close() })
	b.members.change <- struct{}{}
	agenttest.Start(t, a.url, "eu-1", testToken, fc.SADir, fc.Addr())
	eventually(t, 5*time.Second, "b reaches eu-1 through the proxy", func() bool {
		up := b.hub.Reach("eu-1")
		return up != nil && up.(*upstream).l.addr == proxy.Addr()
	})
	proxy.SetBlackhole(true)
	eventually(t, 10*time.Second, "b drops a's claims", func() bool { return b.hub.Reach("eu-1") == nil })
	if !strings.Contains(b.logs.String(), errSilent.Error()) {
		t.Errorf("b's log doesn't say why it gave the stream up:\n%s", b.logs)
	}
}

func TestDecodeRefusesClaimsWithoutACluster(t *testing.T) {
	for _, line := range []string{`{"type":"claim","cluster":"eu-1"}`, `{"type":"claim","status":{}}`, `{"type":"unclaim"}`, `{`} {
		if _, err := decode([]byte(line)); err == nil {
			t.Errorf("decode(%s) took it", line)
		}
	}
}

// TestAnUpstreamsContextEndsWithItsClaim: the context is made only when
// asked for, and is done once the claim has ended, asked for before or
// after.
func TestAnUpstreamsContextEndsWithItsClaim(t *testing.T) {
	l := &link{name: "replica-b"}
	before, after := l.newUpstream("eu-1", time.Now()), l.newUpstream("eu-1", time.Now())
	ctx := before.Context()
	if ctx.Err() != nil || before.Context() != ctx {
		t.Fatalf("a claim's context: %v, the same when asked again: %v", ctx.Err(), before.Context() == ctx)
	}
	if after.ctx != nil {
		t.Error("an upstream made a context no one asked for")
	}
	before.end()
	after.end()
	for _, u := range []*upstream{before, after} {
		select {
		case <-u.Context().Done():
		default:
			t.Errorf("the context of an ended claim (asked for before its end: %v) is not done", u == before)
		}
	}
}

// TestARequestFollowsTheAgent: a request that reaches a replica its
// cluster's agent has just left goes to the replica the agent connected
// to next, here or another, as the API server would have got it.
func TestARequestFollowsTheAgent(t *testing.T) {
	fc := fakecluster.New(t)
	rs := startReplicas(t, "hub-a", "hub-b", "hub-c")
	sa, _ := os.ReadFile(filepath.Join(fc.SADir, "token"))
	for _, to := range []int{2, 1} { // another replica, then the one asking
		ag := agenttest.Start(t, rs[0].url, "eu-1", testToken, fc.SADir, fc.Addr())
		eventually(t, 5*time.Second, "b reaches eu-1 through a", func() bool {
			up := rs[1].hub.Reach("eu-1")
			return up != nil && up.Replica() == "hub-a"
		})
		stale := rs[1].hub.Reach("eu-1")
		ag.Stop(t)
		eventually(t, 5*time.Second, "a lets eu-1 go", func() bool { return rs[0].hub.Local("eu-1") == nil })
		next := agenttest.Start(t, rs[to].url, "eu-1", testToken, fc.SADir, fc.Addr())
		resp := get(t, stale, "/followed", "", nil)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || fc.LastToken() != strings.TrimSpace(string(sa)) {
			t.Errorf("to %s: %d, token %q", rs[to].name, resp.StatusCode, fc.LastToken())
		}
		next.Stop(t)
		eventually(t, 5*time.Second, "eu-1 let go", func() bool { return rs[1].hub.Reach("eu-1") == nil })
	}
}

// TestAStoppingHolderEndsTheWatchesItCarries: a watch another replica
// sends through this one ends at an event's end when this one stops
// (EndWatches, said on the claims stream), cleanly, as its own watches do:
// the client watches again, through the agent's next holder.
func TestAStoppingHolderEndsTheWatchesItCarries(t *testing.T) {
	fc := fakecluster.New(t)
	rs := startReplicas(t, "hub-a", "hub-b")
	agenttest.Start(t, rs[0].url, "eu-1", testToken, fc.SADir, fc.Addr())
	eventually(t, 5*time.Second, "b reaches eu-1", func() bool { return rs[1].hub.Reach("eu-1") != nil })
	resp := get(t, rs[1].hub.Reach("eu-1"), "/watch?watch=true&split=1", "", nil)
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	if line, err := r.ReadString('\n'); err != nil || line != `{"type":"ADDED","n":1}`+"\n" {
		t.Fatalf("first event: %q, %v", line, err)
	}
	// The second event is under way, half sent, when the holder stops.
	eventually(t, 5*time.Second, "the half event reached b", func() bool { return r.Buffered() > 0 || peek(r) })
	rs[0].peers.EndWatches()
	eventually(t, 5*time.Second, "b heard that a ends its watches", func() bool {
		rs[1].peers.mu.Lock()
		defer rs[1].peers.mu.Unlock()
		return rs[1].peers.links["hub-a"].watchesEnding.Load()
	})
	fc.Release()
	rest, err := io.ReadAll(r)
	if err != nil || string(rest) != `{"type":"ADDED","n":2}`+"\n" {
		t.Errorf("after the holder ended its watches: %q, %v; want the event under way, then a clean end", rest, err)
	}
}

// peek reports whether r has a byte to read, waiting a little for one.
func peek(r *bufio.Reader) bool {
	_, err := r.Peek(1)
	return err == nil
}

// TestACutClaimsLineIsNoLine: a claims stream cut midway ends with what
// cut it (a read's error, or the watchdog's cause), not with its last,
// partial line taken for a line that isn't JSON.
func TestACutClaimsLineIsNoLine(t *testing.T) {
	cut := errors.New("connection reset")
	lines := bufio.NewScanner(io.MultiReader(strings.NewReader(`{"type":"ping"}`+"\n"+`{"type":"claim","clu`), iotest.ErrReader(cut)))
	lines.Split(fullLines)
	var got []string
	for lines.Scan() {
		got = append(got, lines.Text())
	}
	if len(got) != 1 || got[0] != `{"type":"ping"}` || !errors.Is(lines.Err(), cut) {
		t.Errorf("lines %q, error %v; want the ping alone, then %v", got, lines.Err(), cut)
	}
}

// TestAgentsSpreadOverTheReplicas: four agents that all connected to one
// of two replicas end two on each, moved make-before-break by the replica
// holding too many, through a dialer that sends each next connection to
// the other replica, as a load balancer might; none is taken over or
// stops.
func TestAgentsSpreadOverTheReplicas(t *testing.T) {
	fc := fakecluster.New(t)
	names := []string{"c0", "c1", "c2", "c3"}
	rs := startReplicasWith(t, replicaOptions{agents: names}, "hub-a", "hub-b")
	addrs := []string{strings.TrimPrefix(rs[0].url, "http://"), strings.TrimPrefix(rs[1].url, "http://")}
	var agents []*agenttest.Agent
	for _, n := range names {
		var dials atomic.Int32
		// The first connection to hub-a, then each to the other replica.
		dial := func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addrs[(dials.Add(1)-1)%2])
		}
		agents = append(agents, agenttest.Start(t, rs[0].url, n, testToken, fc.SADir, fc.Addr(), func(c *agent.Config) { c.DialHub = dial }))
	}
	// Each agent's first connection is to hub-a (the dialer), so hub-b
	// holds only what hub-a asked to move. Not waited for: hub-a may
	// ask before a test sees all four there.
	held := func(r *replica) int { return len(r.hub.HeldNames()) }
	eventually(t, 10*time.Second, "two on each replica", func() bool { return held(rs[0]) == 2 && held(rs[1]) == 2 })
	eventually(t, 5*time.Second, "every cluster Ready on both replicas", func() bool {
		for _, n := range names {
			if statusOf(rs[0].hub, n) != "Ready" || statusOf(rs[1].hub, n) != "Ready" {
				return false
			}
		}
		return true
	})
	for i, a := range agents {
		select {
		case <-a.Done():
			t.Errorf("agent %s stopped: %v", names[i], a.Err())
		default:
		}
	}
	for _, r := range rs {
		if strings.Contains(r.logs.String(), "taken over") {
			t.Errorf("replica %s logged a takeover:\n%s", r.name, r.logs)
		}
	}
}
