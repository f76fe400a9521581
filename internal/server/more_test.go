package server

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/agent"
	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/hub"
	"github.com/tetherhq/tether/internal/kubeproxy"
	"github.com/tetherhq/tether/internal/listfile"
	"github.com/tetherhq/tether/internal/pki"
	"github.com/tetherhq/tether/internal/testutil/fakecluster"
	"github.com/tetherhq/tether/internal/testutil/syncbuf"
)

func TestUnreachableAPIServerSaysWhy(t *testing.T) {
	dead := freeAddr(t) // nothing listens there
	fc := fakecluster.New(t)
	h := startHub(t, Config{Agents: testAgents("eu-1")})
	a := startAgent(t, h.url, "eu-1", fc, func(c *agent.Config) { c.APIServer = dead })
	eventually(t, 5*time.Second, "connected", a.Connected)
	want := `Unreachable: the agent says: "the agent can't reach its API server at ` + dead + ": "
	eventually(t, 5*time.Second, "the status says why", func() bool { return strings.HasPrefix(statusOf(h, "eu-1"), want) })
	// The why, quoted, up to the dial's own words.
	why := strings.TrimSuffix(strconv.Quote(strings.TrimPrefix(want, "Unreachable: ")), `"`)
	if !strings.Contains(h.logs.String(), `A cluster is Unreachable cluster="eu-1" why=`+why) {
		t.Errorf("hub log:\n%s", h.logs)
	}
}

// An agent that doesn't answer keeps its connection until the hub's
// goaway has waited for it; the others the same new list removes must not
// wait behind it.
func TestRemovedAgentsAreDisconnectedTogether(t *testing.T) {
	fc := fakecluster.New(t)
	list := testAgents("eu-1", "us-1", "ap-1")
	h := startHub(t, Config{Agents: list, Heartbeat: time.Minute})
	p := hubProxy(t, h)
	silent := startAgent(t, h.url, "ap-1", fc, viaProxy(t, p)) // first of the names removed
	eu := startAgent(t, h.url, "eu-1", fc)
	eventually(t, 5*time.Second, "connected", func() bool { return silent.Connected() && eu.Connected() })
	p.SetBlackhole(true)
	silentConn := h.connected("ap-1")

	changed := make(chan struct{})
	go func() {
		defer close(changed)
		h.AgentsChanged(list.Replace([]fleet.Agent{{Name: "us-1", TokenHashes: []listfile.Hash{listfile.HashToken(testToken)}}}))
	}()
	eventually(t, 5*time.Second, "eu-1's agent is disconnected", func() bool { return h.connected("eu-1") == nil })
	if h.connected("ap-1") == nil {
		t.Fatal("ap-1's agent, which can't answer, was gone before eu-1's: the goaways were sent one after the other")
	}
	select {
	case <-changed:
		t.Fatal("AgentsChanged returned while it still waited for ap-1's agent")
	default:
	}
	<-changed
	select {
	case <-silentConn.Context().Done():
	default:
		t.Error("AgentsChanged returned before it closed ap-1's connection")
	}
}

func TestOptionsFromEnv(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	users := "- name: alice\n  token: 0123456789abcdef0123456789abcdef\n"
	o, err := OptionsFromEnv(env(map[string]string{"TETHER_PUBLIC_URL": "https://t.example.com/base/", "TETHER_USERS": users}), true)
	if err != nil {
		t.Fatal(err)
	}
	if o.Addr != ":8080" || o.PublicURL.String() != "https://t.example.com/base" || o.BasePath != "/" || o.Heartbeat != 30*time.Second ||
		o.ReconnectSpread != 10*time.Second || o.ShutdownGrace != 30*time.Second || o.MetricsAddr != ":9090" || o.LogFormat != "text" ||
		o.AuditFile != "-" || o.Auth.HubURL != "https://t.example.com/base" || o.AccessReviewsPerQuery != 500 || o.AccessReviewsPerPerson != 1000 ||
		o.Limits != (auth.Limits{Requests: kubeproxy.DefaultMaxRequests, Watches: kubeproxy.DefaultMaxWatches, Sessions: kubeproxy.DefaultMaxSessions}) ||
		o.MaxStreamsPerAgent != hub.DefaultMaxStreamsPerAgent {
		t.Errorf("defaults: %+v", o)
	}
	o, err = OptionsFromEnv(env(map[string]string{"TETHER_PUBLIC_URL": "https://t", "TETHER_USERS": users,
		"TETHER_MAX_REQUESTS_PER_PERSON": "7", "TETHER_MAX_WATCHES_PER_PERSON": " 2000 ", "TETHER_MAX_SESSIONS_PER_PERSON": "1"}), true)
	if err != nil || o.Limits != (auth.Limits{Requests: 7, Watches: 2000, Sessions: 1}) {
		t.Errorf("limits set: %+v, %v", o.Limits, err)
	}
	tests := []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{}, "TETHER_PUBLIC_URL must be set"},
		{map[string]string{"TETHER_PUBLIC_URL": "t.example.com"}, `TETHER_PUBLIC_URL must be the hub's address as people open it, like https://tether.example.com, not "t.example.com"`},
		{map[string]string{"TETHER_PUBLIC_URL": "https://t.example.com/?a=b"}, `TETHER_PUBLIC_URL must be the hub's address without a user, query or fragment, like https://tether.example.com/tether, not "https://t.example.com/?a=b"`},
		{map[string]string{"TETHER_PUBLIC_URL": "https://t.example.com#x"}, "TETHER_PUBLIC_URL must be the hub's address without a user, query or fragment"},
		{map[string]string{"TETHER_PUBLIC_URL": "https://me:pw@t.example.com"}, `TETHER_PUBLIC_URL must be the hub's address without a user, query or fragment, like https://tether.example.com/tether, not "https://me:xxxxx@t.example.com"`},
		{map[string]string{"TETHER_PUBLIC_URL": "https://t.example.com:99999"}, `TETHER_PUBLIC_URL must be the hub's address, with a port from 1 to 65535 if any, like https://tether.example.com:8443, not "https://t.example.com:99999"`},
		{map[string]string{"TETHER_PUBLIC_URL": "https://t.example.com:0"}, "TETHER_PUBLIC_URL must be the hub's address, with a port from 1 to 65535"},
		{map[string]string{"TETHER_PUBLIC_URL": "https://t.example.com?"}, "TETHER_PUBLIC_URL must be the hub's address without a user, query or fragment"},
		{map[string]string{"TETHER_PUBLIC_URL": "https://t", "TETHER_ADDR": "8080"}, `TETHER_ADDR must be an address like :8080, not "8080"`},
		{map[string]string{"TETHER_PUBLIC_URL": "https://t", "TETHER_TLS_CERT_FILE": "c.pem"}, "TETHER_TLS_CERT_FILE and TETHER_TLS_KEY_FILE must be set together"},
		{map[string]string{"TETHER_PUBLIC_URL": "https://t", "TETHER_BASE_PATH": "tether"}, `TETHER_BASE_PATH must be a path starting with /, like /tether or /k8s/hub: segments of letters, digits, '-', '.', '_' and '~', not "tether"`},
		// Each of these made the router panic at start.
		{map[string]string{"TETHER_PUBLIC_URL": "https://t", "TETHER_BASE_PATH": "/a b"}, `TETHER_BASE_PATH must be a path starting with /, like /tether or /k8s/hub: segments of letters, digits, '-', '.', '_' and '~', not "/a b"`},
		{map[string]string{"TETHER_PUBLIC_URL": "https://t", "TETHER_BASE_PATH": "/{x}"}, `TETHER_BASE_PATH must be a path starting with /, like /tether or /k8s/hub: segments of letters, digits, '-', '.', '_' and '~', not "/{x}"`},
		{map[string]string{"TETHER_PUBLIC_URL": "https://t", "TETHER_BASE_PATH": "/x//y"}, `TETHER_BASE_PATH must be a path starting with /, like /tether or /k8s/hub: segments of letters, digits, '-', '.', '_' and '~', not "/x//y"`},
		{map[string]string{"TETHER_PUBLIC_URL": "https://t", "TETHER_BASE_PATH": "//"}, `TETHER_BASE_PATH must be a path starting with /, like /tether or /k8s/hub: segments of letters, digits, '-', '.', '_' and '~', not "//"`},
		{map[string]string{"TETHER_PUBLIC_URL": "https://t", "TETHER_HEARTBEAT_SECONDS": "0"}, `TETHER_HEARTBEAT_SECONDS must be a whole number of seconds, at least 1, not "0"`},
		{map[string]string{"TETHER_PUBLIC_URL": "https://t", "TETHER_HEARTBEAT_SECONDS": "9223372037"}, `TETHER_HEARTBEAT_SECONDS must be at most 31536000 seconds (a year), not "9223372037"`},
		{map[string]string{"TETHER_PUBLIC_URL": "https://t", "TETHER_RECONNECT_SPREAD_SECONDS": "-1"}, "TETHER_RECONNECT_SPREAD_SECONDS must be a whole number of seconds, at least 0"},
		{map[string]string{"TETHER_PUBLIC_URL": "https://t", "TETHER_SHUTDOWN_GRACE_SECONDS": "soon"}, "TETHER_SHUTDOWN_GRACE_SECONDS must be a whole number"},
		{map[string]string{"TETHER_PUBLIC_URL": "https://t", "TETHER_ACCESS_REVIEWS_PER_QUERY": "0"}, `TETHER_ACCESS_REVIEWS_PER_QUERY must be a whole number from 1 to 1000000, not "0"`},
		{map[string]string{"TETHER_PUBLIC_URL": "https://t", "TETHER_ACCESS_REVIEWS_PER_PERSON": "many"}, `TETHER_ACCESS_REVIEWS_PER_PERSON must be a whole number from 1 to 1000000, not "many"`},
		{map[string]string{"TETHER_PUBLIC_URL": "https://t", "TETHER_MAX_STREAMS_PER_AGENT": "0"}, `TETHER_MAX_STREAMS_PER_AGENT must be a whole number from 1 to 1000000, not "0"`},
		{map[string]string{"TETHER_PUBLIC_URL": "https://t", "TETHER_MAX_STREAMS_PER_AGENT": "many"}, `TETHER_MAX_STREAMS_PER_AGENT must be a whole number from 1 to 1000000, not "many"`},
		{map[string]string{"TETHER_PUBLIC_URL": "https://t", "TETHER_METRICS_ADDR": "x"}, `TETHER_METRICS_ADDR must be an address like :9090, or 0 to turn it off, not "x"`},
		{map[string]string{"TETHER_PUBLIC_URL": "https://t", "TETHER_MAX_WATCHES_PER_PERSON": "0"}, `TETHER_MAX_WATCHES_PER_PERSON must be a whole number from 1 to 1000000, not "0"`},
		{map[string]string{"TETHER_PUBLIC_URL": "https://t", "TETHER_MAX_REQUESTS_PER_PERSON": "lots"}, `TETHER_MAX_REQUESTS_PER_PERSON must be a whole number from 1 to 1000000, not "lots"`},
		{map[string]string{"TETHER_PUBLIC_URL": "https://t", "TETHER_MAX_SESSIONS_PER_PERSON": "-1"}, `TETHER_MAX_SESSIONS_PER_PERSON must be a whole number from 1 to 1000000, not "-1"`},
		{map[string]string{"TETHER_PUBLIC_URL": "https://t", "TETHER_INVENTORY_MAX_BYTES": "1Mi"}, `TETHER_INVENTORY_MAX_BYTES must be a number of bytes, like 512Mi or 536870912, of at least 16Mi, not "1Mi"`},
		{map[string]string{"TETHER_PUBLIC_URL": "https://t", "TETHER_INVENTORY_MAX_BYTES": "1G"}, `TETHER_INVENTORY_MAX_BYTES must be a number of bytes`},
		{map[string]string{"TETHER_PUBLIC_URL": "https://t", "TETHER_INVENTORY_MAX_BYTES": "99999999999Gi"}, `TETHER_INVENTORY_MAX_BYTES must be a number of bytes`},
		{map[string]string{"TETHER_PUBLIC_URL": "https://t", "TETHER_LOG_FORMAT": "xml"}, `TETHER_LOG_FORMAT must be text or json, not "xml"`},
		{map[string]string{"TETHER_PUBLIC_URL": "https://t", "TETHER_FLEET_CLUSTERS": "- name: s\n  server: https://h\n  caFile: c\n"}, `TETHER_FLEET_CLUSTERS[0] ("s") needs tokenFile, the path of a file.`},
	}
	tests = append(tests, struct {
		env  map[string]string
		want string
	}{map[string]string{"TETHER_PUBLIC_URL": "https://t"}, "no way for people to sign in is configured"})
	for _, tt := range tests {
		if _, ok := tt.env["TETHER_PUBLIC_URL"]; ok && !strings.HasPrefix(tt.want, "no way") {
			tt.env["TETHER_USERS"] = users
		}
		_, err := OptionsFromEnv(env(tt.env), true)
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("%v: error %v, want %q", tt.env, err, tt.want)
		}
	}
	if _, err := OptionsFromEnv(env(nil), false); err != nil {
		t.Errorf("tether dev needs no public URL: %v", err)
	}
	for v, want := range map[string]int{"": 256 << 20, "512Mi": 512 << 20, "2Gi": 2 << 30, "20000000": 20000000} {
		o, err := OptionsFromEnv(env(map[string]string{"TETHER_INVENTORY_MAX_BYTES": v}), false)
		if err != nil || o.InventoryMaxBytes != want {
			t.Errorf("TETHER_INVENTORY_MAX_BYTES=%q: %d, %v; want %d", v, o.InventoryMaxBytes, err, want)
		}
	}
}

func TestCertReloader(t *testing.T) {
	ca, err := pki.NewCA("ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	// The first certificate's file ends with its CA, and the second's with
	// another CA's: kubeconfigs hand out the one served now.
	ca2, err := pki.NewCA("ca 2", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	write := func(cn string, ca *pki.CA) {
		c, k, err := ca.Issue(pki.Leaf{CommonName: cn, Hosts: []string{"127.0.0.1"}})
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, certFile, append(c, ca.CertPEM...))
		writeFile(t, keyFile, k)
	}
	write("first", ca)
	logs := &syncbuf.Buffer{}
	r, err := newCertReloader(certFile, keyFile, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	leafCN := func() string {
		c, _ := r.get(nil)
		return c.Leaf.Subject.CommonName
	}
	if leafCN() != "first" {
		t.Fatalf("serves %q", leafCN())
	}
	if got := r.selfSignedRoot(); !bytes.Equal(got, ca.CertPEM) {
		t.Errorf("the root for kubeconfigs is %q, want the first CA", got)
	}
	time.Sleep(10 * time.Millisecond) // a newer modification time
	write("second", ca2)
	r.mu.Lock()
	r.checked = time.Time{} // skip the once-a-second wait
	r.mu.Unlock()
	if got := leafCN(); got != "second" {
		t.Fatalf("after the files changed it serves %q, want the new certificate", got)
	}
	if got := r.selfSignedRoot(); !bytes.Equal(got, ca2.CertPEM) {
		t.Errorf("after the files changed the root for kubeconfigs is %q, want the second CA", got)
	}
	if !strings.Contains(logs.String(), "The hub serves its renewed TLS certificate") || !strings.Contains(logs.String(), "notAfter=") {
		t.Errorf("the renewal wasn't logged:\n%s", logs)
	}
	writeFile(t, certFile, []byte("garbage"))
	os.Chtimes(certFile, time.Now().Add(time.Minute), time.Now().Add(time.Minute))
	r.mu.Lock()
	r.checked = time.Time{}
	r.mu.Unlock()
	if got := leafCN(); got != "second" {
		t.Fatalf("after a bad write it serves %q, want the last good certificate", got)
	}
	// The failure is logged once, not at every look at the files.
	r.mu.Lock()
	r.checked = time.Time{}
	r.mu.Unlock()
	leafCN()
	if n := strings.Count(logs.String(), "The TLS certificate files changed but can't be used"); n != 1 {
		t.Errorf("the failure was logged %d times, want once:\n%s", n, logs)
	}
	if _, err := newCertReloader(certFile, keyFile, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "TETHER_TLS_CERT_FILE and TETHER_TLS_KEY_FILE must be a PEM certificate and its key") {
		t.Errorf("a bad pair at start: %v", err)
	}
}
