package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/hub"
	"github.com/tetherhq/tether/internal/protocol"
	"github.com/tetherhq/tether/internal/testutil/fakecluster"
	"github.com/tetherhq/tether/internal/web"
)

func TestClustersAPI(t *testing.T) {
	fc := fakecluster.New(t)
	h, _ := proxyHub(t, fc, "")
	eventually(t, 5*time.Second, "open is Ready", func() bool { return statusOf(h, "open") == "Ready" })

	get := func(path, token string, hdr http.Header) (int, string) {
		code, body, _ := call(t, "GET", h.url+path, token, hdr)
		return code, body
	}
	code, body := get("/api/clusters", aliceToken, nil)
	var list []web.ClusterJSON
	if code != 200 || json.Unmarshal([]byte(body), &list) != nil {
		t.Fatalf("/api/clusters: %d %s", code, body)
	}
	if len(list) != 2 || list[0].Name != "far" || list[1].Name != "open" {
		t.Fatalf("alice sees %s, want far and open only", body)
	}
	far, open := list[0], list[1]
	if far.Status != hub.Unreachable || far.Message != hub.MessageNotConnected || far.ConnectedSince != nil || far.KubernetesVersion != "" {
		t.Errorf("far: %+v", far)
	}
	if open.Status != hub.Ready || open.Message != "" || open.KubernetesVersion != "v1.36.3-test" || open.AgentVersion == "" ||
		open.ConnectedSince == nil || open.LastSeen == nil {
		t.Errorf("open: %+v", open)
	}
	if !strings.Contains(body, `"connectedSince":"`) || strings.Contains(body, `"message":""`) {
		t.Errorf("times must be RFC 3339 and absent values omitted: %s", body)
	}

	if code, body := get("/api/clusters", bobToken, nil); code != 200 || !strings.Contains(body, `"name":"ops"`) {
		t.Errorf("bob, in ops, doesn't see ops: %d %s", code, body)
	}
	if code, body := get("/api/clusters/open", aliceToken, nil); code != 200 || !strings.Contains(body, `"status":"Ready"`) {
		t.Errorf("/api/clusters/open: %d %s", code, body)
	}
	c1, hidden := get("/api/clusters/ops", aliceToken, nil)
	c2, missing := get("/api/clusters/nowhere", aliceToken, nil)
	if c1 != 404 || c2 != 404 || strings.Replace(hidden, `"ops"`, `"nowhere"`, 1) != missing {
		t.Errorf("hidden %d %q, missing %d %q: want the same 404", c1, hidden, c2, missing)
	}
	if code, _ := get("/api/clusters", "", nil); code != 401 {
		t.Errorf("no credentials: %d", code)
	}
	// A path under /api/ that is none of the hub's says what there is.
	for _, path := range []string{"/api/x", "/api/clusters/", "/api/clusters/open/nodes"} {
		if code, body := get(path, aliceToken, nil); code != 404 || !strings.Contains(body, "Tether has no API at "+path+". Its API: /api/clusters,") {
			t.Errorf("GET %s: %d %q, want a 404 listing the API", path, code, body)
		}
	}
	// The address a failed sign-in leaves, loaded again, goes to the form.
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if resp, err := noFollow.Get(h.url + "/login"); err != nil || resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		t.Errorf("GET /login: %v %v, want 303 to /", resp, err)
	} else {
		resp.Body.Close()
	}
	if code, body, hdr := call(t, "POST", h.url+"/api/clusters", aliceToken, nil); code != 405 || hdr.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST /api/clusters: %d %q, Allow %q; want 405", code, body, hdr.Get("Allow"))
	}
	// Not even a signed-in person gets the metrics on the public port:
	// they are on TETHER_METRICS_ADDR only (SPEC section 4).
	if code, body := get("/metrics", aliceToken, nil); code != http.StatusNotFound {
		t.Errorf("GET /metrics on the public port: %d %.100q, want 404", code, body)
	}
	if code, _ := get("/api/clusters", aliceToken, http.Header{"Origin": {"https://evil.example.com"}}); code != 403 {
		t.Errorf("another origin: %d, want 403", code)
	}
	if code, _ := get("/api/clusters", aliceToken, http.Header{"Origin": {"https://hub.example.com"}}); code != 200 {
		t.Errorf("the hub's own origin: %d, want 200", code)
	}
}

func TestEventsStreamChanges(t *testing.T) {
	fc := fakecluster.New(t)
	h, _ := proxyHub(t, fc, "")
	eventually(t, 5*time.Second, "open is Ready", func() bool { return statusOf(h, "open") == "Ready" })

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", h.url+"/api/events", nil)
	req.Header.Set("Authorization", "Bearer "+aliceToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("Content-Type %q", resp.Header.Get("Content-Type"))
	}
	events := make(chan web.ClusterJSON, 16)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var c web.ClusterJSON
				json.Unmarshal([]byte(data), &c)
				events <- c
			}
		}
	}()
	next := func() web.ClusterJSON {
		t.Helper()
		select {
		case c := <-events:
			return c
		case <-time.After(10 * time.Second): // they come within 0.2 s, on a loaded machine too
			t.Fatal("no event within 10 s")
			return web.ClusterJSON{}
		}
	}
	if a, b := next(), next(); a.Name != "far" || b.Name != "open" || b.Status != hub.Ready {
		t.Fatalf("first events: %+v, %+v", a, b)
	}
	// The agent of "open" stops: the stream says so.
	h.agents["open"].Stop(t)
	for {
		c := next()
		if c.Name == "ops" {
			t.Fatal("alice got an event for a cluster she can't see")
		}
		if c.Name == "open" && c.Status == hub.Unreachable && c.Message == hub.MessageNotConnected {
			break
		}
	}
	cancel()
	for range events {
	}
}

// TestEventsTellOfAnAgentThatLeftBeforeItsFirstProbe: a card shows a
// connected agent as "checking" until its first probe answers. An agent that
// leaves before then records the status its cluster had before it came,
// "not connected", so nothing recorded changes; the pages must hear that it
// left all the same, or they say "checking" until the next change.
func TestEventsTellOfAnAgentThatLeftBeforeItsFirstProbe(t *testing.T) {
	fc := fakecluster.New(t)
	fc.ReadyzDelay.Store(int64(time.Hour)) // no probe answers
	h, _ := proxyHub(t, fc, "", func(c *Config) { c.ProbeTimeout = time.Minute })
	come := func() *runningAgent {
		t.Helper()
		probes := fc.Count("/readyz")
		a := startAgent(t, h.url, "far", fc)
		eventually(t, 5*time.Second, "far connects", a.Connected)
		eventually(t, 5*time.Second, "far's first probe waits", func() bool { return fc.Count("/readyz") > probes })
		return a
	}
	come().Stop(t) // far's status is now recorded as "not connected"
	eventually(t, 5*time.Second, "far gone", func() bool { return h.connected("far") == nil })
	s := openEvents(t, h.url, "alice", aliceToken)
	s.until("far shown as not connected", func() bool { return s.last["far"].Message == hub.MessageNotConnected })
	a := come()
	s.until("far shown as checking", func() bool { return s.last["far"].Message == hub.MessageChecking })
	a.Stop(t)
	s.until("far shown as not connected again", func() bool {
		c := s.last["far"]
		return c.Message == hub.MessageNotConnected && c.ConnectedSince == nil
	})
}

func TestSessionCookie(t *testing.T) {
	fc := fakecluster.New(t)
	h, _ := proxyHub(t, fc, "", selfPublic)
	post := func(h *testHub, origin, token string) *http.Response {
		req, _ := http.NewRequest("POST", h.url+"/login", strings.NewReader("token="+token))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", origin)
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	resp := post(h, h.url, aliceToken)
	cookie := resp.Header.Get("Set-Cookie")
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(cookie, "tether_session=") ||
		!strings.Contains(cookie, "HttpOnly") || !strings.Contains(cookie, "SameSite=Lax") || strings.Contains(cookie, aliceToken) {
		t.Errorf("sign-in: %d, Set-Cookie %q", resp.StatusCode, cookie)
	}
	if strings.Contains(cookie, "Secure") {
		t.Errorf("a plain-http hub set a Secure cookie the browser would drop: %q", cookie)
	}
	// Behind an ingress that ends TLS, the hub sees plain requests but
	// people open it at https: the cookie, a hub token, must never go out
	// over plain http.
	tlsEnded, _ := proxyHub(t, fakecluster.New(t), "", func(c *Config) { c.PublicURL = "https://hub.example.com" })
	if c := post(tlsEnded, "https://hub.example.com", aliceToken).Header.Get("Set-Cookie"); !strings.Contains(c, "; Secure") {
		t.Errorf("a hub people open at https set a cookie without Secure: %q", c)
	}
	// The form that asks for a token is never framed by another site, and
	// a form of megabytes isn't read.
	if resp := post(h, h.url, "wrong-token-0123456789abcdef0123456789"); !strings.Contains(resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'") ||
		resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
		t.Errorf("a wrong token: %d, CSP %q, WWW-Authenticate %q", resp.StatusCode, resp.Header.Get("Content-Security-Policy"), resp.Header.Get("WWW-Authenticate"))
	}
	if resp := post(h, h.url, aliceToken+"&pad="+strings.Repeat("a", 100<<10)); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a sign-in form of 100 KiB, a good token in it: %d, want 401 (not read past 64 KiB)", resp.StatusCode)
	}
	if resp := post(h, "https://evil.example.com", aliceToken); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a sign-in posted from another site: %d, want 403", resp.StatusCode)
	}
	if resp := post(h, h.url, "not-a-token-0123456789abcdef0123456789"); resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Set-Cookie") != "" {
		t.Errorf("a wrong token: %d, Set-Cookie %q", resp.StatusCode, resp.Header.Get("Set-Cookie"))
	}
	// The auth proxy's person needs no sign-in; another origin gets no
	// live events either.
	if code, body, _ := call(t, "GET", h.url+"/", "", http.Header{"X-Remote-User": {"carol"}}); code != 200 || !strings.Contains(body, "Signed in as <strong>carol</strong>") {
		t.Errorf("the page through the auth proxy: %d\n%s", code, body)
	}
	// Every endpoint that takes the cookie refuses another site's Origin,
	// the pages too, and serves the hub's own.
	for _, ep := range []struct {
		method, path string
		stream       bool // answers with a stream: the hub's own Origin isn't tried
	}{
		{"GET", "/api/events", true},
		{"GET", "/", false},
		{"GET", "/cluster/open", false},
		{"GET", "/api/kubeconfig", false},
		{"GET", "/api/clusters", false},
		{"GET", "/api/clusters/open", false},
		{"GET", "/api/clusters/open/resources?kind=pods", false},
		{"GET", "/api/clusters/open/gateways?host=shop.example.com", false},
		{"GET", "/api/resources?kind=pods", false},
		{"POST", "/logout", false},
	} {
		if code, body := callBriefly(t, ep.method, h.url+ep.path, aliceToken, http.Header{"Origin": {"https://evil.example.com"}}); code != http.StatusForbidden {
			t.Errorf("%s %s from another origin: %d %.100q, want 403", ep.method, ep.path, code, body)
		}
		if ep.stream {
			continue
		}
		// The 403 is the Origin's: with the hub's own, the same request
		// is not refused.
		if code, body, _ := call(t, ep.method, h.url+ep.path, aliceToken, http.Header{"Origin": {h.url}}); code == http.StatusForbidden {
			t.Errorf("%s %s from the hub's own origin: 403 %.100q", ep.method, ep.path, body)
		}
	}
	if code, body, _ := call(t, "GET", h.url+"/", "", http.Header{"X-Remote-User": {"carol"}, "Origin": {h.url}}); code != 200 || !strings.Contains(body, "Signed in as <strong>carol</strong>") {
		t.Errorf("the page with the hub's own Origin: %d\n%s", code, body)
	}
	// Another site's plain GET, which sends no Origin, is refused by its
	// Fetch Metadata; a link followed from there still opens the page.
	embedded := http.Header{"X-Remote-User": {"carol"}, "Sec-Fetch-Site": {"cross-site"}, "Sec-Fetch-Mode": {"no-cors"}, "Sec-Fetch-Dest": {"script"}}
	for _, path := range []string{"/api/clusters", "/api/kubeconfig", "/"} {
		if code, body, _ := call(t, "GET", h.url+path, "", embedded); code != http.StatusForbidden {
			t.Errorf("GET %s embedded in another site's page: %d %.100q, want 403", path, code, body)
		}
	}
	followed := http.Header{"X-Remote-User": {"carol"}, "Sec-Fetch-Site": {"cross-site"}, "Sec-Fetch-Mode": {"navigate"}, "Sec-Fetch-Dest": {"document"}}
	if code, body, _ := call(t, "GET", h.url+"/", "", followed); code != 200 || !strings.Contains(body, "Signed in as <strong>carol</strong>") {
		t.Errorf("the page from a link on another site: %d\n%.200s", code, body)
	}
	// A kubeconfig asked for with a token the hub doesn't take says so, not
	// "sign in first" (the README's curl -f then writes no error page).
	for token, want := range map[string]string{
		"":                  "sign in first",
		"not-a-known-token": "send a bearer token the hub accepts",
	} {
		if code, body, _ := call(t, "GET", h.url+"/api/kubeconfig", token, nil); code != http.StatusUnauthorized || !strings.Contains(body, want) {
			t.Errorf("a kubeconfig asked for with token %q: %d %q, want 401 saying %q", token, code, body, want)
		}
	}

	// /clusters/ never takes the cookie.
	value := strings.TrimPrefix(strings.SplitN(cookie, ";", 2)[0], "tether_session=")
	req, _ := http.NewRequest("GET", h.url+"/clusters/open/api", nil)
	req.AddCookie(&http.Cookie{Name: "tether_session", Value: value})
	r2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r2.Body.Close()
	if r2.StatusCode != http.StatusUnauthorized {
		t.Errorf("/clusters/ with only the session cookie: %d, want 401", r2.StatusCode)
	}
}

// TestHiddenClusterAnswersLikeAMissingOne: a cluster the person may not see
// answers every endpoint that names it exactly as one that doesn't exist
// (SPEC section 3): the same status, headers and body but for the name.
func TestHiddenClusterAnswersLikeAMissingOne(t *testing.T) {
	fc := fakecluster.New(t)
	answerAccessReviews(t, fc, func(user, resource, namespace string) bool { return true })
	h, _ := proxyHub(t, fc, "")
	// ops has an inventory, with a gateway, that anyone who sees ops may
	// list: what leaks if visibility isn't checked.
	gw := res("gateways", "istio-system", "public", true)
	gw.Hosts = []string{"shop.example.com"}
	feed(t, h, h.inventory.Receiver("ops"), "ops", &protocol.Update{Snapshot: true, Complete: true,
		Kinds:   []protocol.KindState{{Kind: "pods"}, {Kind: "gateways"}},
		Upserts: []protocol.Resource{gw, res("pods", "shop", "web-1", true)}})

	tests := []struct {
		path    string
		bobSees string // in what bob, who sees ops, gets there
	}{
		{"/api/clusters/%s", `"name":"ops"`},
		{"/api/clusters/%s/resources?kind=pods", `"name":"web-1"`},
		{"/api/clusters/%s/gateways?host=shop.example.com", `"gateway":"istio-system/public"`},
		{"/cluster/%s", "ops"},
		{"/clusters/%s/api", `"path":"/api"`},
		{"/clusters/%s", `"path":"/"`},
	}
	// The lists leave ops out for alice.
	for _, path := range []string{"/api/clusters", "/api/resources?kind=pods"} {
		if code, body, _ := call(t, "GET", h.url+path, bobToken, nil); code != http.StatusOK || !strings.Contains(body, `"ops"`) {
			t.Errorf("bob's %s: %d %s, want ops in it", path, code, body)
		}
		if code, body, _ := call(t, "GET", h.url+path, aliceToken, nil); code != http.StatusOK || strings.Contains(body, `"ops"`) {
			t.Errorf("alice's %s: %d %s, want 200 without ops", path, code, body)
		}
	}
	for _, tt := range tests {
		path := tt.path
		t.Run(path, func(t *testing.T) {
			// The endpoint has something to hide.
			if code, body, _ := call(t, "GET", h.url+fmt.Sprintf(path, "ops"), bobToken, nil); code != http.StatusOK || !strings.Contains(body, tt.bobSees) {
				t.Fatalf("bob, who sees ops: %d %s, want 200 with %s", code, body, tt.bobSees)
			}
			hCode, hidden, hHdr := call(t, "GET", h.url+fmt.Sprintf(path, "ops"), aliceToken, nil)
			mCode, missing, mHdr := call(t, "GET", h.url+fmt.Sprintf(path, "nowhere"), aliceToken, nil)
			if hCode != http.StatusNotFound || mCode != http.StatusNotFound {
				t.Fatalf("hidden %d %s, missing %d %s: want 404 for both", hCode, hidden, mCode, missing)
			}
			for _, q := range []string{`"%s"`, `\"%s\"`} {
				hidden = strings.ReplaceAll(hidden, fmt.Sprintf(q, "ops"), fmt.Sprintf(q, "nowhere"))
			}
			if hidden != missing {
				t.Errorf("bodies differ:\nhidden  %q\nmissing %q", hidden, missing)
			}
			for _, hdr := range []http.Header{hHdr, mHdr} {
				hdr.Del("Date")
				hdr.Del("Content-Length")
			}
			if !reflect.DeepEqual(hHdr, mHdr) {
				t.Errorf("headers differ:\nhidden  %v\nmissing %v", hHdr, mHdr)
			}
		})
	}
}

// TestClustersAPIKeyNames reads /api/clusters and /api/clusters/<name> as
// plain JSON, not through the struct that writes them, so a renamed key
// fails: the names, times in RFC 3339 and absent values omitted are SPEC
// section 4's.
func TestClustersAPIKeyNames(t *testing.T) {
	fc := fakecluster.New(t)
	h, _ := proxyHub(t, fc, "")
	eventually(t, 5*time.Second, "open is Ready", func() bool { return statusOf(h, "open") == "Ready" })
	// Distinct counts, so that swapped keys fail too: 2 of 3 nodes ready,
	// 4 pods not ready, 1 application out of sync.
	objs := []protocol.Resource{
		res("nodes", "", "n1", true), res("nodes", "", "n2", true), res("nodes", "", "n3", false),
		res("pods", "a", "ok", true),
	}
	for i := range 4 {
		objs = append(objs, notReadyPod("a", fmt.Sprintf("p%d", i), "Pending", 0))
	}
	synced, drifted := res("applications", "argocd", "shop", true), res("applications", "argocd", "billing", true)
	synced.Sync, synced.Health = "Synced", "Healthy"
	drifted.Sync, drifted.Health = "OutOfSync", "Healthy"
	objs = append(objs, synced, drifted)
	feed(t, h, h.inventory.Receiver("open"), "open", &protocol.Update{Snapshot: true, Complete: true,
		Kinds: []protocol.KindState{{Kind: "nodes"}, {Kind: "pods"}, {Kind: "applications"}}, Upserts: objs})

	getJSON := func(path string, v any) {
		t.Helper()
		code, body, hdr := call(t, "GET", h.url+path, aliceToken, nil)
		if code != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "application/json") {
			t.Fatalf("%s: %d %s %s", path, code, hdr.Get("Content-Type"), body)
		}
		if err := json.Unmarshal([]byte(body), v); err != nil {
			t.Fatalf("%s: %v\n%s", path, err, body)
		}
	}
	var list []map[string]any
	getJSON("/api/clusters", &list)
	var one map[string]any
	getJSON("/api/clusters/open", &one)
	if len(list) != 2 || list[0]["name"] != "far" || list[1]["name"] != "open" {
		t.Fatalf("/api/clusters: %v, want far and open", list)
	}

	// open: connected, with an inventory; no message.
	for _, open := range []map[string]any{list[1], one} {
		for _, k := range []string{"name", "labels", "status", "kubernetesVersion", "agentVersion", "connectedSince", "lastSeen", "summary"} {
			if _, ok := open[k]; !ok {
				t.Errorf("open has no %q: %v", k, open)
			}
		}
		if _, ok := open["message"]; ok {
			t.Errorf("a Ready cluster has a message: %v", open)
		}
		if open["status"] != "Ready" || open["kubernetesVersion"] != "v1.36.3-test" || open["agentVersion"] == "" {
			t.Errorf("open: %v", open)
		}
		if labels, _ := open["labels"].(map[string]any); labels["env"] != "prod" || labels["region"] != "eu" || len(labels) != 2 {
			t.Errorf("open's labels: %v", open["labels"])
		}
		var times [2]time.Time
		for i, k := range []string{"connectedSince", "lastSeen"} {
			s, _ := open[k].(string)
			var err error
			if times[i], err = time.Parse(time.RFC3339, s); err != nil {
				t.Errorf("%s %q: %v", k, s, err)
			}
		}
		if times[1].Before(times[0]) {
			t.Errorf("lastSeen %v is before connectedSince %v", times[1], times[0])
		}
		summary, _ := open["summary"].(map[string]any)
		want := map[string]any{"nodesReady": 2.0, "nodesTotal": 3.0, "podsNotReady": 4.0, "appsOutOfSync": 1.0}
		for k, v := range want {
			if summary[k] != v {
				t.Errorf("summary[%q] = %v, want %v (summary %v)", k, summary[k], v, summary)
			}
		}
	}

	// The history is in the one cluster's answer only, for its page.
	if h, _ := one["history"].([]any); len(h) == 0 || h[0].(map[string]any)["status"] != "Ready" {
		t.Errorf("open's history: %v; want Ready last", one["history"])
	}
	if _, ok := list[1]["history"]; ok {
		t.Errorf("/api/clusters has a history: %v", list[1])
	}

	// far: never connected; absent values omitted.
	far := list[0]
	if far["status"] != "Unreachable" || far["message"] != hub.MessageNotConnected {
		t.Errorf("far: %v", far)
	}
	for _, k := range []string{"kubernetesVersion", "agentVersion", "connectedSince", "lastSeen", "summary"} {
		if _, ok := far[k]; ok {
			t.Errorf("far, never connected, has %q: %v", k, far)
		}
	}
}

// callBriefly is call for an answer that may be a stream: it reads the
// body for at most 2 s, so a stream served where a refusal was due fails
// the test instead of hanging it.
func callBriefly(t *testing.T, method, url, token string, header http.Header) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	code, body, _ := callWithin(t, ctx, method, url, token, header)
	return code, body
}

// TestEventsStreamEndsWithItsPerson: an open event stream asks again, at
// each keep-alive, who it is for: once its person is off the users list,
// it ends, rather than go on telling them of clusters.
func TestEventsStreamEndsWithItsPerson(t *testing.T) {
	file := filepath.Join(t.TempDir(), "users.yaml")
	if err := os.WriteFile(file, []byte(testUsers), 0o600); err != nil {
		t.Fatal(err)
	}
	people, err := auth.New(auth.Config{UsersFile: file, Debounce: 10 * time.Millisecond, PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { people.Close() })
	h := startHub(t, Config{Agents: testAgents("eu-1"), Auth: people, PublicURL: "https://hub.example.com", EventsKeepAlive: 100 * time.Millisecond})
	req, _ := http.NewRequestWithContext(t.Context(), "GET", h.url+"/api/events", nil)
	req.Header.Set("Authorization", "Bearer "+aliceToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	ended := make(chan struct{})
	go func() { io.Copy(io.Discard, resp.Body); close(ended) }()
	select {
	case <-ended:
		t.Fatal("the stream ended at once")
	case <-time.After(300 * time.Millisecond): // three keep-alives: alice is still listed
	}
	bobOnly := testUsers[strings.Index(testUsers, "- name: bob"):]
	if err := os.WriteFile(file, []byte(bobOnly), 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("alice's stream went on after she left the users list")
	}
}
