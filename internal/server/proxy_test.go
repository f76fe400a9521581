package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/hub"
	"github.com/tetherhq/tether/internal/kubeproxy"
	"github.com/tetherhq/tether/internal/listfile"
	"github.com/tetherhq/tether/internal/testutil/fakecluster"
	"github.com/tetherhq/tether/internal/testutil/syncbuf"
)

// People the proxy tests use: tokens of 32 characters and more.
const (
	aliceToken = "alice-token-0123456789abcdef0123456789"
	bobToken   = "bob-token-0123456789abcdef0123456789ab"
)

const testUsers = `
- name: alice
  token: ` + aliceToken + `
  groups: [dev]
- name: bob
  token: ` + bobToken + `
  groups: [ops]
`

// proxyHub starts a hub with people, the clusters "open" (everyone), "ops"
// (group ops only) and "far" (no agent), and an agent for "open" and "ops"
// whose API server is fc.
func proxyHub(t *testing.T, fc *fakecluster.Cluster, groupPrefix string, mods ...func(*Config)) (*testHub, *syncbuf.Buffer) {
	t.Helper()
	// The auth proxy is trusted from loopback, where the tests run, so a
	// test can be anyone it names.
	people, err := auth.New(auth.Config{Users: testUsers, ProxyUserHeader: "X-Remote-User", ProxyGroupsHeader: "X-Remote-Group",
		ProxyTrusted: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { people.Close() })
	hash := []listfile.Hash{listfile.HashToken(testToken)}
	list := fleet.New([]fleet.Agent{
		{Name: "open", TokenHashes: hash, Groups: fleet.Groups{Everyone: true}, Labels: map[string]string{"env": "prod", "region": "eu"}},
		{Name: "ops", TokenHashes: hash, Groups: fleet.Groups{Names: []string{"ops"}}},
		{Name: "far", TokenHashes: hash, Groups: fleet.Groups{Everyone: true}, Labels: map[string]string{"env": "dev", "region": "eu"}},
	})
	audit := &syncbuf.Buffer{}
	cfg := Config{Agents: list, Auth: people, AuthConfig: auth.Config{GroupPrefix: groupPrefix}, Audit: audit, PublicURL: "https://hub.example.com"}
	for _, m := range mods {
		m(&cfg)
	}
	h := startHub(t, cfg)
	h.agents = map[string]*runningAgent{}
	for _, n := range []string{"open", "ops"} {
		a := startAgent(t, h.url+strings.TrimSuffix(cfg.BasePath, "/"), n, fc)
		eventually(t, 5*time.Second, n+" connects", a.Connected)
		h.agents[n] = a
	}
	return h, audit
}

// call sends a request as token (none when "") and returns the status and
// body; redirects are not followed.
func call(t *testing.T, method, url, token string, header http.Header) (int, string, http.Header) {
	t.Helper()
	return callWithin(t, t.Context(), method, url, token, header)
}

// callWithin is call with the request's context: the body is read until
// it ends or ctx does.
func callWithin(t *testing.T, ctx context.Context, method, url, token string, header http.Header) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), resp.Header
}

func TestProxyImpersonatesAndStripsCredentials(t *testing.T) {
	fc := fakecluster.New(t)
	h, audit := proxyHub(t, fc, "tether:")
	smuggled := http.Header{
		"Impersonate-User":       {"admin"},
		"Impersonate-Group":      {"system:masters"},
		"Impersonate-Extra-Team": {"x"},
		"Cookie":                 {"session=1"},
		"X-Remote-User":          {"admin"},
		"Connection":             {"X-Remote-User"},
		// The API server's audit log takes it for the client's address.
		"X-Real-Ip": {"203.0.113.9"},
		// The API server takes it for its audit event's id.
		"Audit-Id": {"chosen-by-the-client"},
		// Credentials an authenticating proxy hands the app behind it,
		// which the API server would pass on to a proxied pod.
		"X-Forwarded-Access-Token": {"oauth2-proxy-access-token"},
		"X-Pomerium-Jwt-Assertion": {"pomerium.jwt"},
		"Cf-Access-Jwt-Assertion":  {"cloudflare.jwt"},
		"X-Ms-Token-Aad-Id-Token":  {"azure.jwt"},
		"X-Amzn-Oidc-Data":         {"alb.jwt"},
		"X-Goog-Iap-Jwt-Assertion": {"iap.jwt"},
		"X-Auth-Request-User":      {"alice"}, // who, not a credential: passes
	}
	code, body, answer := call(t, "GET", h.url+"/clusters/open/api/v1/namespaces/a/pods?limit=5", aliceToken, smuggled)
	if code != 200 {
		t.Fatalf("status %d: %s", code, body)
	}
	// The person is told, as kubectl prints a Warning: --as had no effect.
	if got := answer.Values("Warning"); len(got) != 1 || got[0] != kubeproxy.ImpersonationWarning {
		t.Errorf("Warning: %q, want the hub's one", got)
	}
	var got struct {
		Path   string
		Header http.Header
		Host   string
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	if got.Path != "/api/v1/namespaces/a/pods?limit=5" || got.Host != hub.APIServerName {
		t.Errorf("the API server saw path %q, Host %q", got.Path, got.Host)
	}
	hd := got.Header
	if hd.Get("Authorization") != "Bearer service-account-token-1" || hd.Get("Impersonate-User") != "alice" ||
		strings.Join(hd.Values("Impersonate-Group"), ",") != "tether:dev" || len(hd.Get(kubeproxy.RequestIDHeader)) != 32 {
		t.Errorf("the API server saw %v", hd)
	}
	for k := range smuggled {
		switch k {
		case "Impersonate-User", "Impersonate-Group", // the hub's own, checked above
			"Connection", "X-Auth-Request-User":
			continue
		}
		if hd.Get(k) != "" {
			t.Errorf("a smuggled header reached the API server: %s: %q", k, hd.Values(k))
		}
	}
	if hd.Get("X-Auth-Request-User") != "alice" {
		t.Errorf("X-Auth-Request-User, which names no credential, was removed: %v", hd)
	}
	// The audit line is written once the answer is: wait for it.
	eventually(t, 5*time.Second, "an audit line", func() bool { return strings.Contains(audit.String(), hd.Get(kubeproxy.RequestIDHeader)) })
	var rec kubeproxy.AuditRecord
	if err := json.Unmarshal(bytes.TrimSpace([]byte(lastLine(audit.String()))), &rec); err != nil {
		t.Fatalf("audit line: %v", err)
	}
	if rec.Person != "alice" || rec.Cluster != "open" || rec.Verb != "list" || rec.Status != 200 || rec.RequestID != hd.Get(kubeproxy.RequestIDHeader) || rec.Bytes == 0 || rec.Duration <= 0 {
		t.Errorf("audit: %+v", rec)
	}
	// The fields SPEC names, under these keys.
	var keys map[string]any
	json.Unmarshal([]byte(lastLine(audit.String())), &keys)
	for _, k := range []string{"time", "person", "groups", "cluster", "verb", "path", "status", "duration", "bytes", "requestId"} {
		if _, ok := keys[k]; !ok {
			t.Errorf("the audit line has no %q: %s", k, lastLine(audit.String()))
		}
	}
	if _, _, answer := call(t, "GET", h.url+"/clusters/open/api/v1/namespaces/a/pods", aliceToken, nil); answer.Get("Warning") != "" {
		t.Errorf("a request without Impersonate-* headers got Warning: %q", answer.Values("Warning"))
	}
}

// TestProxyHeadersSurviveConnection: a client that names the hub's own
// headers in Connection, as hop-by-hop, can't strip them: the API server
// still gets the service account's token and the person to impersonate.
func TestProxyHeadersSurviveConnection(t *testing.T) {
	fc := fakecluster.New(t)
	h, _ := proxyHub(t, fc, "")
	hdr := http.Header{"Connection": {"Authorization, Impersonate-User, Impersonate-Group, " + kubeproxy.RequestIDHeader}}
	code, body, _ := call(t, "GET", h.url+"/clusters/open/api", aliceToken, hdr)
	var got struct{ Header http.Header }
	if err := json.Unmarshal([]byte(body), &got); code != 200 || err != nil {
		t.Fatalf("%d %s", code, body)
	}
	hd := got.Header
	if hd.Get("Authorization") != "Bearer service-account-token-1" || hd.Get("Impersonate-User") != "alice" ||
		hd.Get("Impersonate-Group") != "dev" || hd.Get(kubeproxy.RequestIDHeader) == "" {
		t.Errorf("the API server saw %v", hd)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func TestProxyRefusals(t *testing.T) {
	fc := fakecluster.New(t)
	h, _ := proxyHub(t, fc, "")
	code, hiddenBody, _ := call(t, "GET", h.url+"/clusters/ops/api", aliceToken, nil)
	code2, missingBody, _ := call(t, "GET", h.url+"/clusters/nowhere/api", aliceToken, nil)
	if code != 404 || code2 != 404 || strings.Replace(hiddenBody, `\"ops\"`, `\"nowhere\"`, 1) != missingBody {
		t.Errorf("a hidden cluster answers %d %s; a missing one %d %s", code, hiddenBody, code2, missingBody)
	}
	if code, _, _ := call(t, "GET", h.url+"/clusters/ops/api", bobToken, nil); code != 200 {
		t.Errorf("bob, in ops, gets %d from ops", code)
	}
	if code, body, hdr := call(t, "GET", h.url+"/clusters/open/api", "", nil); code != 401 || hdr.Get("WWW-Authenticate") == "" {
		t.Errorf("no credentials: %d %s", code, body)
	}
	if code, _, _ := call(t, "GET", h.url+"/clusters/open/api", "not-a-known-token-0123456789abcdef", nil); code != 401 {
		t.Errorf("a wrong token: %d", code)
	}
	for _, who := range []http.Header{
		{"X-Remote-User": {"system:admin"}},
		{"X-Remote-User": {"carol"}, "X-Remote-Group": {"dev,system:masters"}},
	} {
		if code, body, _ := call(t, "GET", h.url+"/clusters/open/api", "", who); code != 403 {
			t.Errorf("%v: %d %s, want 403", who, code, body)
		}
	}
	if code, body, _ := call(t, "GET", h.url+"/clusters/open/api", "", http.Header{"X-Remote-User": {"carol"}}); code != 200 {
		t.Errorf("carol through the proxy: %d %s", code, body)
	}
	if code, body, _ := call(t, "GET", h.url+"/clusters/far/api", aliceToken, nil); code != 503 || !strings.Contains(body, hub.MessageNotConnected) {
		t.Errorf("a cluster without its agent: %d %s", code, body)
	}
}

// TestProxyRefusesRedirectsElsewhere: the hub follows no redirect, and
// passes none on that leads off the cluster: the client would follow it
// with the person's token (issue 33; TestProxyConfinesLocations has the
// cases).
func TestProxyRefusesRedirectsElsewhere(t *testing.T) {
	fc := fakecluster.New(t)
	h, _ := proxyHub(t, fc, "")
	code, body, hdr := call(t, "GET", h.url+"/clusters/open/redirect", aliceToken, nil)
	if code != http.StatusBadGateway || hdr.Get("Location") != "" || !strings.Contains(body, `answered with a redirect to \"https://elsewhere.example.com\"`) {
		t.Fatalf("redirect: %d, Location %q: %s", code, hdr.Get("Location"), body)
	}
	if fc.Count("/elsewhere") != 0 {
		t.Error("the hub followed the redirect")
	}
}

// watchStream starts a watch of the fake API server's /stream through the
// hub, and returns it once its first event has arrived. ctx ending ends it.
func watchStream(ctx context.Context, t *testing.T, h *testHub) *bufio.Reader {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", h.url+"/clusters/open/stream?watch=true", nil)
	req.Header.Set("Authorization", "Bearer "+aliceToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	r := bufio.NewReader(resp.Body)
	if line, err := r.ReadString('\n'); err != nil || line != "event 1\n" {
		t.Fatalf("first event: %q, %v", line, err)
	}
	return r
}

func TestProxyStreamsWithoutBuffering(t *testing.T) {
	fc := fakecluster.New(t)
	h, _ := proxyHub(t, fc, "")
	r := watchStream(t.Context(), t, h)
	// The fake API server holds the second event until the first has
	// reached the client: it arrived unbuffered.
	fc.Release()
	line, err := r.ReadString('\n')
	if err != nil || line != "event 2\n" {
		t.Fatalf("second event: %q, %v", line, err)
	}
}

func TestProxyKeepsConnectionsToTheAPIServer(t *testing.T) {
	fc := fakecluster.New(t)
	// One probe, at connect, which keeps a connection of its own: the
	// people's streams are counted apart (open.streams).
	h, _ := proxyHub(t, fc, "", func(c *Config) { c.ProbeInterval = time.Hour })
	waitFirstProbe(t, h)
	for range 5 {
		if code, body, _ := call(t, "GET", h.url+"/clusters/open/api/v1/pods", aliceToken, nil); code != 200 {
			t.Fatalf("GET: %d %s", code, body)
		}
	}
	conns := fc.ConnsFor("/api/v1/pods")
	if len(conns) != 1 {
		t.Errorf("five GETs one after another came on %d connections (%v), want 1", len(conns), conns)
	}
	if got := h.agent("open").PeopleStreams; got != 1 {
		t.Errorf("%v streams open, want 1: the kept connection", got)
	}
	if got := h.agent("open").APIStreams; got != 2 {
		t.Errorf("%v streams open in all, want 2: the GETs' kept connection and the probe's", got)
	}

	// A watch the client leaves closes its connection and stream.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	watchStream(ctx, t, h)
	if got := h.agent("open").PeopleStreams; got != 1 {
		t.Errorf("%v streams open during the watch, want 1: the kept connection's", got)
	}
	cancel()
	eventually(t, 5*time.Second, "the watch's connection and stream close", func() bool { return h.agent("open").PeopleStreams == 0 })
	// Leaving is no fault: nothing to warn of.
	if strings.Contains(h.logs.String(), "read error during body copy") {
		t.Errorf("a watch the client left was logged as a failed read:\n%s", h.logs)
	}
}

// waitFirstProbe waits for the probes made when the agents connected,
// which open streams of their own, to be done; the next come 10 s later.
// All of them: the hub counts the streams it opens to all clusters, and
// ops's first probe, late on a busy machine, was counted once as a GET's.
func waitFirstProbe(t *testing.T, h *testHub) {
	t.Helper()
	for name := range h.agents {
		eventually(t, 5*time.Second, name+"'s first probe is done", func() bool { return statusOf(h, name) == hub.Ready })
	}
}

// The API server closes the connection the hub keeps (its idle timeout, or
// a restart): the next GET goes again on a new one, and the person sees
// nothing of it.
func TestProxySendsAgainOnAConnectionTheAPIServerClosed(t *testing.T) {
	fc := fakecluster.New(t)
	h, _ := proxyHub(t, fc, "", func(c *Config) { c.ProbeInterval = time.Hour }) // one probe, at connect
	waitFirstProbe(t, h)
	get := func() {
		t.Helper()
		if code, body, _ := call(t, "GET", h.url+"/clusters/open/api/v1/pods", aliceToken, nil); code != 200 {
			t.Fatalf("GET: %d %s", code, body)
		}
	}
	get()
	opened := h.value("tether_streams_opened_total")
	fc.Srv.CloseClientConnections()
	eventually(t, 5*time.Second, "the kept connection's stream ends", func() bool { return h.agent("open").APIStreams == 0 })
	get()
	if got := h.value("tether_streams_opened_total") - opened; got != 1 {
		t.Errorf("%v streams opened for the GET after the API server closed the kept connection, want 1", got)
	}
}

func TestFailedUpgradeClosesTheConnection(t *testing.T) {
	fc := fakecluster.New(t)
	h, _ := proxyHub(t, fc, "")
	c, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "POST /clusters/open/refuse-upgrade HTTP/1.1\r\nHost: hub\r\nAuthorization: Bearer "+aliceToken+
		"\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nContent-Length: 0\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !resp.Close {
		t.Fatalf("status %d, close %v: want 403 and the connection closed", resp.StatusCode, resp.Close)
	}
	// What the client sends next must reach nothing: the hub closes.
	io.WriteString(c, "GET /clusters/open/after HTTP/1.1\r\nHost: hub\r\nAuthorization: Bearer "+aliceToken+"\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := br.Read(make([]byte, 1)); err == nil {
		t.Fatalf("the connection stayed open after a failed upgrade (read %d bytes)", n)
	}
	time.Sleep(100 * time.Millisecond)
	if fc.Count("/after") != 0 {
		t.Error("bytes sent after a failed upgrade reached the API server")
	}
}

// TestUpgradeIsAudited: an upgraded connection (as exec and port-forward
// make) is spliced after the API server's 101, and its audit line says 101
// and counts the bytes sent to the client over it.
func TestUpgradeIsAudited(t *testing.T) {
	fc := fakecluster.New(t)
	h, audit := proxyHub(t, fc, "")
	c, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "POST /clusters/open/echo-upgrade HTTP/1.1\r\nHost: hub\r\nAuthorization: Bearer "+aliceToken+
		"\r\nConnection: Upgrade\r\nUpgrade: echo\r\nContent-Length: 0\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status %d, want 101", resp.StatusCode)
	}
	msg := strings.Repeat("echo me ", 1000)
	io.WriteString(c, msg)
	back := make([]byte, len(msg))
	if _, err := io.ReadFull(br, back); err != nil || string(back) != msg {
		t.Fatalf("read back %d bytes, %v", len(back), err)
	}
	c.Close()
	if line := auditLineOf(t, audit, "/echo-upgrade"); line.Status != http.StatusSwitchingProtocols || line.Bytes < int64(len(msg)) {
		t.Errorf("the audit line says status %d and %d bytes; want 101 and at least the %d bytes echoed", line.Status, line.Bytes, len(msg))
	}
}

// TestCutResponseIsLogged: a response the API server's side stops sending
// midway (here, its agent goes away) reaches the client cut short, not
// ended as if complete, and the hub logs why through its own logger.
func TestCutResponseIsLogged(t *testing.T) {
	fc := fakecluster.New(t)
	h, _ := proxyHub(t, fc, "")
	r := watchStream(t.Context(), t, h)
	h.agents["open"].Stop(t)
	rest, err := io.ReadAll(r)
	if err == nil {
		t.Fatalf("the cut response ended cleanly after %q", rest)
	}
	eventually(t, 5*time.Second, "the hub logs the cut", func() bool {
		return strings.Contains(h.logs.String(), "ReverseProxy read error during body copy")
	})
}

// TestVisibilityIgnoresTheGroupPrefix: with TETHER_IMPERSONATE_GROUP_PREFIX
// set, a cluster's groups are compared with the person's own groups, not
// the prefixed ones the API server is sent (SPEC section 3).
func TestVisibilityIgnoresTheGroupPrefix(t *testing.T) {
	fc := fakecluster.New(t)
	h, _ := proxyHub(t, fc, "tether:")
	tests := []struct {
		name   string
		token  string
		header http.Header
		want   int
	}{
		{"bob, in ops", bobToken, nil, http.StatusOK},
		{"alice, in dev only", aliceToken, nil, http.StatusNotFound},
		{"carol, in ops through the auth proxy", "", http.Header{"X-Remote-User": {"carol"}, "X-Remote-Group": {"ops"}}, http.StatusOK},
		// Already prefixed is another group: ops is not among carol's.
		{"carol, in tether:ops through the auth proxy", "", http.Header{"X-Remote-User": {"carol"}, "X-Remote-Group": {"tether:ops"}}, http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body, _ := call(t, "GET", h.url+"/clusters/ops/api", tt.token, tt.header)
			if code != tt.want {
				t.Fatalf("GET /clusters/ops/api: %d %s, want %d", code, body, tt.want)
			}
			if code == http.StatusOK {
				var got struct{ Header http.Header }
				if err := json.Unmarshal([]byte(body), &got); err != nil {
					t.Fatal(err)
				}
				if g := got.Header.Values("Impersonate-Group"); len(g) != 1 || g[0] != "tether:ops" {
					t.Errorf("the API server was sent groups %q, want [tether:ops]", g)
				}
			}
			// The JSON API decides the same way.
			apiCode, apiBody, _ := call(t, "GET", h.url+"/api/clusters/ops", tt.token, tt.header)
			if apiCode != tt.want {
				t.Errorf("GET /api/clusters/ops: %d %s, want %d", apiCode, apiBody, tt.want)
			}
			// So does the kubeconfig, which has its own list.
			kcCode, kc, _ := call(t, "GET", h.url+"/api/kubeconfig", tt.token, tt.header)
			if kcCode != http.StatusOK {
				t.Fatalf("GET /api/kubeconfig: %d %s", kcCode, kc)
			}
			if names := strings.Contains(kc, "https://hub.example.com/clusters/ops\n"); names != (tt.want == http.StatusOK) {
				t.Errorf("the kubeconfig names ops: %v, want %v\n%s", names, tt.want == http.StatusOK, kc)
			}
		})
	}
}

// TestAPIServerDownAnswers503: a request the agent can't take to its API
// server is answered 503 ServiceUnavailable, as the API server's own
// aggregator answers for a backend it can't reach, with the agent's reason.
func TestAPIServerDownAnswers503(t *testing.T) {
	fc := fakecluster.New(t)
	h, _ := proxyHub(t, fc, "", func(c *Config) { c.ProbeInterval = time.Hour })
	waitFirstProbe(t, h)
	fc.Srv.Close()
	code, body, _ := call(t, "GET", h.url+"/clusters/open/api/v1/pods", aliceToken, nil)
	var st struct{ Code int32 }
	json.Unmarshal([]byte(body), &st)
	if code != http.StatusServiceUnavailable || st.Code != http.StatusServiceUnavailable ||
		!strings.Contains(body, `"reason":"ServiceUnavailable"`) || !strings.Contains(body, "the agent can't reach its API server") {
		t.Errorf("with the API server down: %d %s", code, body)
	}
}

// TestUnauthorizedSaysWhatToDo: a token from before the hub's key changed
// (a restarted dev hub, say) is refused with what to do about it, which
// kubectl prints; an unknown token learns nothing more than that.
func TestUnauthorizedSaysWhatToDo(t *testing.T) {
	fc := fakecluster.New(t)
	h, _ := proxyHub(t, fc, "")
	before, err := auth.New(auth.Config{Users: testUsers}) // the hub before it restarted
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()
	old, _, err := before.IssueToken(auth.Person{Name: "carol", Groups: []string{"dev"}, Source: auth.SourceProxy})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ token, want string }{
		{old, "Tether doesn't know who you are: your token was signed with a key this hub no longer has (it restarted without a lasting key, or its key was replaced). Get a new kubeconfig from the hub's fleet page."},
		{"not-a-token-anyone-has-0123456789abcdef", "Tether doesn't know who you are: send a bearer token the hub accepts (the kubeconfig from the hub's fleet page holds one)."},
	} {
		code, body, _ := call(t, "GET", h.url+"/clusters/open/api/v1/pods", tc.token, nil)
		var st struct{ Message string }
		json.Unmarshal([]byte(body), &st)
		if code != http.StatusUnauthorized || st.Message != tc.want {
			t.Errorf("%d %q, want 401 %q", code, st.Message, tc.want)
		}
	}
	expired := fmt.Errorf("%w: a hub-issued token that expired", auth.ErrExpired)
	if got := kubeproxy.Unauthorized(expired); !strings.Contains(got, "your token has expired") {
		t.Errorf("an expired token: %q", got)
	}
}

// TestForeignOriginWithProxyHeaders: an auth proxy's headers come from its
// cookie when a browser sends the request, so another site's page could
// open an exec WebSocket (which CORS doesn't stop) as the person. A request
// signed in by the proxy's headers with a foreign Origin is refused; the
// hub's own Origin, or none (kubectl, client-go), goes through, and so does
// a bearer token, which no browser sends on its own.
func TestForeignOriginWithProxyHeaders(t *testing.T) {
	fc := fakecluster.New(t)
	h, _ := proxyHub(t, fc, "")
	for _, tc := range []struct {
		who, origin string
		want        int
	}{
		{"X-Remote-User: alice", "https://evil.example", http.StatusForbidden},
		{"X-Remote-User: alice", "https://hub.example.com", http.StatusSwitchingProtocols},
		{"X-Remote-User: alice", "", http.StatusSwitchingProtocols},
		{"Authorization: Bearer " + aliceToken, "https://evil.example", http.StatusSwitchingProtocols},
		// Fetch Metadata from another site's page, or a sibling host's,
		// with no Origin: a link followed is refused here too.
		{"X-Remote-User: alice\r\nSec-Fetch-Site: cross-site\r\nSec-Fetch-Mode: navigate\r\nSec-Fetch-Dest: document", "", http.StatusForbidden},
		{"X-Remote-User: alice\r\nSec-Fetch-Site: same-site\r\nSec-Fetch-Mode: no-cors\r\nSec-Fetch-Dest: image", "", http.StatusForbidden},
		{"X-Remote-User: alice\r\nSec-Fetch-Site: same-origin\r\nSec-Fetch-Mode: websocket", "", http.StatusSwitchingProtocols},
		{"X-Remote-User: alice\r\nSec-Fetch-Site: none\r\nSec-Fetch-Mode: navigate\r\nSec-Fetch-Dest: document", "", http.StatusSwitchingProtocols},
		{"Authorization: Bearer " + aliceToken + "\r\nSec-Fetch-Site: cross-site", "", http.StatusSwitchingProtocols},
	} {
		c, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		origin := ""
		if tc.origin != "" {
			origin = "Origin: " + tc.origin + "\r\n"
		}
		io.WriteString(c, "GET /clusters/open/echo-upgrade HTTP/1.1\r\nHost: hub.example.com\r\n"+tc.who+"\r\n"+
			origin+"Connection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != tc.want {
			t.Errorf("an upgrade signed in with %q, Origin %q: %s, want %d", tc.who, tc.origin, resp.Status, tc.want)
		}
	}
}
