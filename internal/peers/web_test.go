package peers

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"

	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/hub"
	"github.com/tetherhq/tether/internal/kubeproxy"
	"github.com/tetherhq/tether/internal/listfile"
	"github.com/tetherhq/tether/internal/logging"
	"github.com/tetherhq/tether/internal/pki"
	"github.com/tetherhq/tether/internal/protocol"
	"github.com/tetherhq/tether/internal/recording"
	"github.com/tetherhq/tether/internal/testutil/agenttest"
	"github.com/tetherhq/tether/internal/testutil/fakecluster"
	"github.com/tetherhq/tether/internal/testutil/syncbuf"
	"github.com/tetherhq/tether/internal/web"
)

// webReplica is a replica with its people's side: the web routes the
// inventory tests need on a public port, and web.PeerHandler beside the
// claims and forwarding on the peer port, as the hub wires them.
type webReplica struct {
	*replica
	public   string // people's address
	web      *web.Web
	people   *auth.Authenticator
	peerHits atomic.Int32
}

// webOptions shape startWebReplicas' replicas: agents is the agents list,
// timeout web's ReplicaTimeout, and wrap, when set, wraps replica i's
// web.PeerHandler.
type webOptions struct {
	agents  []fleet.Agent
	timeout time.Duration
	wrap    func(i int, h http.Handler) http.Handler
	// recordings, when set, gives replica i its session recordings,
	// which the group auditors watch all of.
	recordings func(i int) *recording.Store
}

func startWebReplicas(t *testing.T, o webOptions, names ...string) []*webReplica {
	t.Helper()
	f := &fleetOfReplicas{addrs: map[string]string{}, certs: map[string]tls.Certificate{}}
	for _, n := range names {
		f.certs[n] = selfSigned(t, n)
	}
	var rs []*webReplica
	var changes []chan struct{}
	for i, n := range names {
		logs := &syncbuf.Buffer{}
		log := slog.New(logging.NewTextHandler(logs, nil))
		h, err := hub.New(hub.Config{Logger: log, Agents: fleet.New(o.agents), Replica: n, Heartbeat: time.Second, ProbeInterval: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		agents := httptest.NewServer(http.HandlerFunc(h.ServeAgent))
		ch := make(chan struct{}, 1)
		changes = append(changes, ch)
		p := New(Config{Logger: log, Hub: h, Members: &members{self: n, all: f, change: ch}, Ping: 200 * time.Millisecond})

		authCfg := auth.Config{ProxyUserHeader: "X-Remote-User", ProxyGroupsHeader: "X-Remote-Group",
			ProxyTrusted: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}
		people, err := auth.New(authCfg)
		if err != nil {
			t.Fatal(err)
		}
		px, err := kubeproxy.New(kubeproxy.Config{Logger: log, Clusters: h, Auth: people, AuthConfig: authCfg})
		if err != nil {
			t.Fatal(err)
		}
		wcfg := web.Config{Logger: log, Clusters: h, Proxy: px, Auth: people, AuthConfig: authCfg,
			Replicas: p, ReplicaTimeout: o.timeout, ReviewTimeout: 2 * time.Second}
		if o.recordings != nil {
			wcfg.Recordings, wcfg.RecordingViewers = o.recordings(i), []string{"auditors"}
		}
		wb := web.New(wcfg)
		public := http.NewServeMux()
		public.HandleFunc("GET /api/clusters/{cluster}", wb.ServeClusterJSON)
		public.HandleFunc("GET /api/clusters/{cluster}/resources", wb.ServeResources)
		public.HandleFunc("GET /api/clusters/{cluster}/gateways", wb.ServeGateways)
		public.HandleFunc("GET /api/clusters/{cluster}/domains", wb.ServeDomains)
		public.HandleFunc("GET /api/clusters/{cluster}/events", wb.ServeObjectEvents)
		public.HandleFunc("GET /api/resources", wb.ServeFleetResources)
		public.HandleFunc("POST /api/login/device", wb.ServeDeviceStart)
		public.HandleFunc("POST /api/login/token", wb.ServeLoginToken)
		public.HandleFunc("POST /device", wb.ServeDeviceApprove)
		public.HandleFunc("GET /api/clusters/{cluster}/recordings", wb.ServeRecordings)
		public.HandleFunc("GET /api/clusters/{cluster}/recordings/{id}", wb.ServeRecording)
		public.HandleFunc("GET /cluster/{cluster}/recordings/{id}", wb.ServeRecordingPage)
		pub := httptest.NewServer(public)

		r := &webReplica{public: pub.URL, web: wb, people: people}
		var peerWeb http.Handler = wb.PeerHandler()
		if o.wrap != nil {
			peerWeb = o.wrap(i, peerWeb)
		}
		peerMux := http.NewServeMux()
		peerMux.Handle(web.PeerPath, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			r.peerHits.Add(1)
			peerWeb.ServeHTTP(w, req)
		}))
		peerMux.Handle("/", p.Handler())
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := p.Server(peerMux)
		go srv.ServeTLS(ln, "", "")
		r.replica = &replica{name: n, hub: h, peers: p, url: agents.URL, logs: logs, peer: srv}
		f.mu.Lock()
		f.addrs[n] = ln.Addr().String()
		f.mu.Unlock()
		rs = append(rs, r)
		t.Cleanup(func() {
			pub.Close()
			srv.Close()
			p.Close()
			agents.Config.Shutdown(context.Background())
			px.Close()
			h.Close()
			agents.Close()
			people.Close()
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

// reviewingCluster is a fake cluster that answers the access reviews the
// hub sends as a person: may says whether user may list resource in
// namespace ("" for all of them).
func reviewingCluster(t *testing.T, may func(user, resource, namespace string) bool) *fakecluster.Cluster {
	t.Helper()
	fc := fakecluster.New(t)
	cert, err := fc.CA.IssueTLS(pki.Leaf{CommonName: "kube-apiserver", Hosts: []string{"kubernetes.default.svc", "127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews", func(w http.ResponseWriter, r *http.Request) {
		fc.Note(r)
		var review authorizationv1.SelfSubjectAccessReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		a := review.Spec.ResourceAttributes
		review.Status.Allowed = a != nil && a.Verb == "list" && may(r.Header.Get("Impersonate-User"), a.Resource, a.Namespace)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(review)
	})
	mux.Handle("/", fc.Srv.Config.Handler)
	srv := httptest.NewUnstartedServer(mux)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	fc.Srv = srv
	return fc
}

const reviewsPath = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"

// podsOf feeds cluster's inventory on r, as the hub takes an agent's
// snapshot: one ready pod of each name, in namespace team-a.
func podsOf(t *testing.T, r *webReplica, cluster string, pods ...string) {
	t.Helper()
	u := &protocol.Update{Snapshot: true, Complete: true, Kinds: []protocol.KindState{{Kind: "pods"}, {Kind: "events"}, {Kind: "gateways"}}}
	for _, p := range pods {
		u.Upserts = append(u.Upserts, protocol.Resource{ResourceRef: protocol.ResourceRef{Kind: "pods", Namespace: "team-a", Name: p}, Ready: true})
	}
	if err := u.Validate(); err != nil {
		t.Fatal(err)
	}
	r.hub.Inventory().Receiver(cluster).Apply(u, time.Now())
}

func agentEntry(name string, groups ...string) fleet.Agent {
	g := fleet.Groups{Everyone: len(groups) == 0, Names: groups}
	return fleet.Agent{Name: name, TokenHashes: []listfile.Hash{listfile.HashToken(testToken)}, Groups: g}
}

// ask sends a GET to url as user in group, and returns the answer: its
// status, body and Tether-Left-Out (header or trailer).
func ask(t *testing.T, url, user, group string, header http.Header) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if user != "" {
		req.Header.Set("X-Remote-User", user)
		req.Header.Set("X-Remote-Group", group)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	left := resp.Header.Get("Tether-Left-Out") + resp.Trailer.Get("Tether-Left-Out")
	return resp.StatusCode, string(b), left
}

// twoReplicas starts hub-a and hub-b, with eu-1's agent (and ops-1's, for
// the ops group alone) on hub-a and us-1's on hub-b, each cluster with
// pods: bob may list nothing, the others pods.
func twoReplicas(t *testing.T, o webOptions) (a, b *webReplica, users *sync.Map) {
	t.Helper()
	users = &sync.Map{} // who the clusters were asked about
	may := func(user, resource, namespace string) bool {
		users.Store(user, true)
		return user != "bob" && resource == "pods"
	}
	o.agents = []fleet.Agent{agentEntry("eu-1"), agentEntry("eu-2"), agentEntry("us-1"), agentEntry("ops-1", "ops")}
	rs := startWebReplicas(t, o, "hub-a", "hub-b")
	a, b = rs[0], rs[1]
	for _, c := range []struct {
		on      *webReplica
		cluster string
		pods    []string
	}{{a, "eu-1", []string{"web"}}, {a, "eu-2", []string{"cache"}}, {a, "ops-1", []string{"secret-job"}}, {b, "us-1", []string{"api"}}} {
		fc := reviewingCluster(t, may)
		agenttest.Start(t, c.on.url, c.cluster, testToken, fc.SADir, fc.Addr())
		other := a
		if c.on == a {
			other = b
		}
		eventually(t, 5*time.Second, "the other replica reaches "+c.cluster+" through "+c.on.name, func() bool {
			up := other.hub.Reach(c.cluster)
			return up != nil && up.Replica() == c.on.name
		})
		podsOf(t, c.on, c.cluster, c.pods...)
	}
	return a, b, users
}

// TestInventoryOfAnotherReplicasCluster: a cluster's queries on the
// replica that doesn't hold its agent are answered by the one that does,
// from its store, its access reviews asked as the person; a person who
// may not see the cluster gets the 404 the holder gives, and nothing is
// carried for them.
func TestInventoryOfAnotherReplicasCluster(t *testing.T) {
	a, b, users := twoReplicas(t, webOptions{})
	code, body, _ := ask(t, b.public+"/api/clusters/eu-1/resources?kind=pods", "alice", "dev", nil)
	if code != http.StatusOK || !strings.Contains(body, `"name":"web"`) || !strings.Contains(body, `"cluster":"eu-1"`) {
		t.Fatalf("alice's pods of eu-1 on hub-b: %d %s", code, body)
	}
	if _, ok := users.Load("alice"); !ok {
		t.Error("eu-1 was never asked what alice may list")
	}
	if code, body, _ := ask(t, b.public+"/api/clusters/eu-1/resources?kind=pods", "bob", "dev", nil); code != http.StatusOK || strings.TrimSpace(body) != "[]" {
		t.Errorf("bob's pods of eu-1 on hub-b: %d %s, want [] as bob may list none", code, body)
	}
	for _, path := range []string{"/api/clusters/eu-1/domains", "/api/clusters/eu-1/events?namespace=team-a&object=Pod/web"} {
		if code, body, _ := ask(t, b.public+path, "alice", "dev", nil); code != http.StatusOK {
			t.Errorf("%s on hub-b: %d %s", path, code, body)
		}
	}
	if code, body, _ := ask(t, b.public+"/api/clusters/eu-1", "alice", "dev", nil); code != http.StatusOK || !strings.Contains(body, `"summary"`) {
		t.Errorf("/api/clusters/eu-1 on hub-b: %d %s, want its inventory's summary", code, body)
	}

	// Hidden alike, on either replica, and never carried.
	hits := a.peerHits.Load()
	for _, path := range []string{"/api/clusters/ops-1/resources?kind=pods", "/api/clusters/ops-1/domains", "/api/clusters/ops-1"} {
		codeA, bodyA, _ := ask(t, a.public+path, "alice", "dev", nil)
		codeB, bodyB, _ := ask(t, b.public+path, "alice", "dev", nil)
		if codeA != http.StatusNotFound || codeA != codeB || bodyA != bodyB {
			t.Errorf("%s: hub-a %d %q, hub-b %d %q; want the same 404", path, codeA, bodyA, codeB, bodyB)
		}
	}
	if got := a.peerHits.Load(); got != hits {
		t.Errorf("hub-b carried %d queries about a cluster alice may not see", got-hits)
	}
	if code, body, _ := ask(t, b.public+"/api/clusters/ops-1/resources?kind=pods", "olga", "ops", nil); code != http.StatusOK || !strings.Contains(body, "secret-job") {
		t.Errorf("olga of ops, on hub-b: %d %s", code, body)
	}
}

// TestFleetResourcesAcrossReplicas: /api/resources on either replica
// covers the clusters of both, in the order of their names.
func TestFleetResourcesAcrossReplicas(t *testing.T) {
	a, b, _ := twoReplicas(t, webOptions{})
	want := []string{"eu-1/web", "eu-2/cache", "us-1/api"}
	for _, r := range []*webReplica{a, b} {
		code, body, left := ask(t, r.public+"/api/resources?kind=pods", "alice", "dev", nil)
		if got := itemNames(t, body); code != http.StatusOK || strings.Join(got, " ") != strings.Join(want, " ") || left != "" {
			t.Errorf("alice's pods on %s: %d %v, left out %q; want %v", r.name, code, got, left, want)
		}
	}
	if code, body, _ := ask(t, b.public+"/api/resources?kind=pods", "olga", "ops", nil); code != http.StatusOK || !strings.Contains(body, "secret-job") {
		t.Errorf("olga's pods on hub-b: %d %s", code, body)
	}
}

func itemNames(t *testing.T, body string) []string {
	t.Helper()
	var items []struct {
		Cluster, Name string
	}
	if err := json.Unmarshal([]byte(body), &items); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	var out []string
	for _, it := range items {
		out = append(out, it.Cluster+"/"+it.Name)
	}
	return out
}

// TestFleetResourcesNameWhatAReplicaDidntGive: a replica that gives
// nothing in time, or stops midway, has the clusters it had yet to give
// named in Tether-Left-Out, with why; the rest of the answer stands. A
// cluster's own query to a silent replica is 503 at the same bound.
func TestFleetResourcesNameWhatAReplicaDidntGive(t *testing.T) {
	var mode atomic.Value // of hub-a's peer web handler: "", "silent" or "cut"
	mode.Store("")
	// A silent replica answers nothing, ever: its handler holds until the
	// test ends, not until its request's context does (which may end
	// first, and would then answer an empty 200).
	quiet := make(chan struct{})
	wrap := func(i int, h http.Handler) http.Handler {
		if i != 0 {
			return h
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch mode.Load() {
			case "silent":
				<-quiet
				return
			case "cut":
				// The first cluster's part, then the connection drops.
				h.ServeHTTP(&cutAfter{ResponseWriter: w, lines: 2}, r)
				return
			}
			h.ServeHTTP(w, r)
		})
	}
	a, b, _ := twoReplicas(t, webOptions{timeout: 500 * time.Millisecond, wrap: wrap})
	t.Cleanup(func() { close(quiet) }) // before the replicas stop: cleanups run last first

	mode.Store("silent")
	code, body, left := ask(t, b.public+"/api/resources?kind=pods", "alice", "dev", nil)
	if got := itemNames(t, body); code != http.StatusOK || strings.Join(got, " ") != "us-1/api" ||
		!strings.Contains(left, `eu-1 (the hub replica "hub-a", which holds its agent, didn't answer: it gave nothing for 500ms)`) || !strings.Contains(left, "eu-2 (") {
		t.Errorf("with hub-a silent: %d %v, left out %q", code, got, left)
	}

	// A cluster's own query waits no longer.
	if code, body, _ := ask(t, b.public+"/api/clusters/eu-1/resources?kind=pods", "alice", "dev", nil); code != http.StatusServiceUnavailable ||
		!strings.Contains(body, `the hub replica "hub-a", which holds its agent, didn't answer: it gave nothing for 500ms`) {
		t.Errorf("eu-1's pods with hub-a silent: %d %s", code, body)
	}

	mode.Store("cut")
	code, body, left = ask(t, b.public+"/api/resources?kind=pods", "alice", "dev", nil)
	if got := itemNames(t, body); code != http.StatusOK || strings.Join(got, " ") != "eu-1/web us-1/api" ||
		strings.Contains(left, "eu-1 (") || !strings.Contains(left, `eu-2 (the hub replica "hub-a", which holds its agent, didn't answer`) {
		t.Errorf("with hub-a cut midway: %d %v, left out %q", code, got, left)
	}

	// hub-a's peer port gone: its clusters are named, whether hub-b
	// still thought hub-a held them or had dropped its claims.
	mode.Store("")
	a.stop()
	code, body, left = ask(t, b.public+"/api/resources?kind=pods", "alice", "dev", nil)
	if got := itemNames(t, body); code != http.StatusOK || strings.Join(got, " ") != "us-1/api" ||
		!strings.Contains(left, "eu-1 (") || !strings.Contains(left, "eu-2 (") {
		t.Errorf("with hub-a's peer port gone: %d %v, left out %q", code, got, left)
	}
}

// cutAfter passes lines lines of an answer, then drops the connection.
type cutAfter struct {
	http.ResponseWriter
	lines int
}

func (c *cutAfter) Write(p []byte) (int, error) {
	if c.lines <= 0 {
		if conn, _, err := http.NewResponseController(c.ResponseWriter).Hijack(); err == nil {
			conn.Close()
		}
		return 0, io.ErrClosedPipe
	}
	c.lines -= strings.Count(string(p), "\n")
	n, err := c.ResponseWriter.Write(p)
	http.NewResponseController(c.ResponseWriter).Flush()
	return n, err
}

func (c *cutAfter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// TestAPeerAssertionIsNoneOnThePublicPort: the header one replica asserts
// a person with means nothing on the port people use, nor does its path.
func TestAPeerAssertionIsNoneOnThePublicPort(t *testing.T) {
	_, b, _ := twoReplicas(t, webOptions{})
	person := base64.RawURLEncoding.EncodeToString([]byte(`{"name":"alice","groups":["ops"]}`))
	for _, path := range []string{"/api/clusters/eu-1/resources?kind=pods", "/api/resources?kind=pods", "/api/clusters/us-1/resources?kind=pods"} {
		if code, body, _ := ask(t, b.public+path, "", "", http.Header{"Tether-Peer-Person": {person}}); code != http.StatusUnauthorized {
			t.Errorf("%s with only a peer assertion: %d %s, want 401", path, code, body)
		}
	}
	// Signed in as alice of dev, the assertion doesn't make her of ops.
	if code, body, _ := ask(t, b.public+"/api/clusters/ops-1/resources?kind=pods", "alice", "dev", http.Header{"Tether-Peer-Person": {person}}); code != http.StatusNotFound {
		t.Errorf("alice of dev asserting ops: %d %s, want 404", code, body)
	}
	if code, _, _ := ask(t, b.public+web.PeerPath+"clusters/eu-1/resources?kind=pods", "", "", http.Header{"Tether-Peer-Person": {person}}); code != http.StatusNotFound {
		t.Errorf("the peer path on the public port: %d, want 404", code)
	}
}
