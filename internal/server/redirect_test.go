package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/tetherhq/tether/internal/kubeproxy"
	"github.com/tetherhq/tether/internal/testutil/fakecluster"
	"github.com/tetherhq/tether/internal/testutil/recordingapi"
	"github.com/tetherhq/tether/internal/testutil/syncbuf"
)

// recordingHub is proxyHub with cluster open's API server a recording one,
// reached through an agent as kubernetes.default.svc.
func recordingHub(t *testing.T, mods ...func(*Config)) (*testHub, *syncbuf.Buffer, *recordingapi.Server) {
	t.Helper()
	h, audit := proxyHub(t, fakecluster.New(t), "", mods...)
	api := recordingapi.Start(t, recordingapi.Config{})
	api.Answer("/version", recordingapi.Reply(200, http.Header{"Content-Type": {"application/json"}}, `{"gitVersion":"v1.36.3-recording"}`))
	dir := t.TempDir()
	if err := api.WriteServiceAccount(dir, "recording-service-account-token"); err != nil {
		t.Fatal(err)
	}
	old := h.connected("open")
	h.agents["open"].Stop(t)
	a := startAgentFor(t, h.url, "open", dir, api.Addr)
	h.agents["open"] = a
	eventually(t, 5*time.Second, "open's agent for the recording API server connects", func() bool {
		c := h.connected("open")
		return c != nil && c != old && a.Connected()
	})
	return h, audit, api
}

// auditLineFor waits for the audit line of the request for path, and
// returns it.
func auditLineFor(t *testing.T, audit *syncbuf.Buffer, path string) kubeproxy.AuditRecord {
	t.Helper()
	var rec kubeproxy.AuditRecord
	eventually(t, 5*time.Second, "an audit line for "+path, func() bool {
		for line := range strings.SplitSeq(audit.String(), "\n") {
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Path == path {
				return true
			}
		}
		return false
	})
	return rec
}

// TestProxyConfinesLocations: no answer through /clusters/<name> points a
// client anywhere but into that cluster's prefix on the hub (issue 33). A
// Location or Content-Location naming the API server, or a path on it, is
// rewritten into the hub's URL for the cluster; a redirect anywhere else
// becomes a 502 whose Status says why, and any other answer loses the
// header; the audit line says where it pointed.
func TestProxyConfinesLocations(t *testing.T) {
	h, audit, api := recordingHub(t)
	const hub = "https://hub.example.com/clusters/open"
	const svc = "/api/v1/namespaces/x/services/s:80/proxy/"
	for i, c := range []struct {
		method string
		status int
		header http.Header // the API server's
		code   int         // the client's
		// location and contentLocation are what the client gets.
		location, contentLocation string
		refused                   string // the audit line's location
	}{
		// Where the API server (its proxy, rewriting the pod's own
		// redirects) points back at itself.
		{"GET", 302, http.Header{"Location": {"https://kubernetes.default.svc" + svc + "login?next=%2F#top"}}, 302, hub + svc + "login?next=%2F#top", "", ""},
		{"GET", 301, http.Header{"Location": {"https://KUBERNETES.default.svc:443/api/v1/x%2Fy"}}, 301, hub + "/api/v1/x%2Fy", "", ""},
		{"GET", 307, http.Header{"Location": {"//kubernetes.default.svc/version"}}, 307, hub + "/version", "", ""},
		{"POST", 308, http.Header{"Location": {"/apis/"}}, 308, hub + "/apis/", "", ""},
		{"GET", 303, http.Header{"Location": {"../foo?q"}}, 303, hub + svc + "case4/foo?q", "", ""},
		{"GET", 302, http.Header{"Location": {"bar"}}, 302, hub + svc + "case5/a/bar", "", ""},
		{"GET", 302, http.Header{"Location": {"../../../../../../../../../.."}}, 302, hub + "/", "", ""},
		{"POST", 201, http.Header{"Location": {"https://kubernetes.default.svc/api/v1/namespaces/x/configmaps/c"}}, 201, hub + "/api/v1/namespaces/x/configmaps/c", "", ""},
		{"GET", 200, http.Header{"Content-Location": {"/api/v1/namespaces/x/pods/p"}}, 200, "", hub + "/api/v1/namespaces/x/pods/p", ""},
		// Anywhere else: 502 for a redirect, the header dropped otherwise.
		{"GET", 302, http.Header{"Location": {"https://elsewhere.example.com/"}}, 502, "", "", "https://elsewhere.example.com/"},
		{"GET", 302, http.Header{"Location": {"http://kubernetes.default.svc/api"}}, 502, "", "", "http://kubernetes.default.svc/api"},
		{"GET", 301, http.Header{"Location": {"//evil.example/steal"}}, 502, "", "", "//evil.example/steal"},
		{"GET", 302, http.Header{"Location": {`/\evil.example/steal`}}, 502, "", "", `/\evil.example/steal`},
		{"GET", 302, http.Header{"Location": {"https://kubernetes.default.svc@evil.example/"}}, 502, "", "", "https://kubernetes.default.svc@evil.example/"},
		{"GET", 302, http.Header{"Location": {"https://kubernetes.default.svc.evil.example/"}}, 502, "", "", "https://kubernetes.default.svc.evil.example/"},
		{"GET", 302, http.Header{"Location": {"https://kubernetes.default.svc:6443/"}}, 502, "", "", "https://kubernetes.default.svc:6443/"},
		{"GET", 302, http.Header{"Location": {"javascript:alert(1)"}}, 502, "", "", "javascript:alert(1)"},
		{"GET", 302, http.Header{"Location": {"/%2e%2e/%2e%2e/clusters/ops/api"}}, 502, "", "", "/%2e%2e/%2e%2e/clusters/ops/api"},
		{"GET", 302, http.Header{"Location": {"/api", "https://evil.example/"}}, 502, "", "", "/api, https://evil.example/"},
		{"PUT", 307, http.Header{"Location": {"https://evil.example/"}}, 502, "", "", "https://evil.example/"},
		{"HEAD", 302, http.Header{"Location": {"https://evil.example/"}}, 502, "", "", "https://evil.example/"},
		{"GET", 300, http.Header{"Location": {"https://evil.example/"}}, 502, "", "", "https://evil.example/"},
		{"POST", 201, http.Header{"Location": {"https://evil.example/created"}}, 201, "", "", "https://evil.example/created"},
		{"GET", 304, http.Header{"Location": {"https://evil.example/"}}, 304, "", "", "https://evil.example/"},
		{"GET", 200, http.Header{"Content-Location": {"https://evil.example/"}}, 200, "", "", "https://evil.example/"},
	} {
		path := fmt.Sprintf("%scase%d/a/b", svc, i)
		api.Answer(path, recordingapi.Reply(c.status, c.header, "from the pod\n"))
		code, body, got := call(t, c.method, h.url+"/clusters/open"+path, aliceToken, nil)
		name := fmt.Sprintf("case %d: %s %d %q", i, c.method, c.status, c.header)
		if code != c.code || got.Get("Location") != c.location || got.Get("Content-Location") != c.contentLocation ||
			len(got.Values("Location")) > 1 {
			t.Errorf("%s: the client got %d, Location %q, Content-Location %q; want %d, %q, %q",
				name, code, got.Values("Location"), got.Get("Content-Location"), c.code, c.location, c.contentLocation)
		}
		if code == 502 && c.method != "HEAD" {
			var st struct{ Kind, Reason, Message string }
			if err := json.Unmarshal([]byte(body), &st); err != nil || st.Kind != "Status" || st.Reason != "BadGateway" ||
				!strings.Contains(st.Message, `Cluster "open" answered with a redirect to `) || !strings.Contains(st.Message, "send your token there") {
				t.Errorf("%s: the 502's body is %s", name, body)
			}
			if strings.Contains(body, "from the pod") {
				t.Errorf("%s: the pod's body reached the client: %s", name, body)
			}
		}
		if rec := auditLineFor(t, audit, path); rec.Status != c.code || rec.Location != c.refused {
			t.Errorf("%s: the audit line has status %d, location %q; want %d, %q", name, rec.Status, rec.Location, c.code, c.refused)
		}
	}
	if got := h.logs.String(); !strings.Contains(got, `A cluster answered a request with a redirect away from it; Tether answered 502 instead (the audit line's location says where to) cluster="open"`) {
		t.Errorf("no log line about the refused redirect:\n%s", got)
	}
}

// TestProxyRefusesRedirectsOfUpgrades: an exec or port-forward answered
// with a redirect off the cluster gets the 502 too, and its connection is
// closed, as after any refused upgrade.
func TestProxyRefusesRedirectsOfUpgrades(t *testing.T) {
	h, _, api := recordingHub(t)
	const path = "/api/v1/namespaces/x/pods/p/exec"
	api.Answer(path, recordingapi.Redirect(http.StatusFound, "https://evil.example/exec"))
	code, _, got := call(t, "POST", h.url+"/clusters/open"+path+"?command=sh", aliceToken,
		http.Header{"Connection": {"Upgrade"}, "Upgrade": {"SPDY/3.1"}})
	if code != http.StatusBadGateway || got.Get("Location") != "" {
		t.Errorf("an upgrade answered with a redirect away: %d, Location %q", code, got.Get("Location"))
	}
}

// TestProxyRewritesWithoutPublicURL: a hub without a public URL points
// the client at the cluster's path on the hub, under its base path.
func TestProxyRewritesWithoutPublicURL(t *testing.T) {
	h, _, api := recordingHub(t, func(c *Config) { c.PublicURL = "" })
	api.Answer("/here", recordingapi.Redirect(http.StatusFound, "/there"))
	if code, _, got := call(t, "GET", h.url+"/clusters/open/here", aliceToken, nil); code != 302 || got.Get("Location") != "/clusters/open/there" {
		t.Errorf("%d, Location %q", code, got.Get("Location"))
	}
}

// TestClientGoFollowsNoRedirectOffTheCluster: a pod behind a service
// proxy answers client-go with a redirect to a host of its own, over plain
// http. client-go follows redirects, and its transport adds the bearer
// token to each request it follows to: the other host must get no
// request, and no token (issue 33).
func TestClientGoFollowsNoRedirectOffTheCluster(t *testing.T) {
	// No public URL: the Location is the cluster's path on the hub, which
	// the client resolves against the hub's test address.
	h, _, api := recordingHub(t, func(c *Config) { c.PublicURL = "" })
	other := recordingapi.Start(t, recordingapi.Config{Plain: true})
	api.Answer("/api/v1/namespaces/x/services/", recordingapi.Redirect(http.StatusFound, other.URL+"/collect"))
	api.Answer("/api/v1/namespaces/x/pods/", recordingapi.Redirect(http.StatusTemporaryRedirect, "https://kubernetes.default.svc/api/v1/namespaces/x/configmaps/c"))
	api.Answer("/api/v1/namespaces/x/configmaps/c", recordingapi.Reply(200, http.Header{"Content-Type": {"application/json"}},
		`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"c","namespace":"x"}}`))
	dc, err := dynamic.NewForConfig(&rest.Config{Host: h.url + "/clusters/open", BearerToken: aliceToken})
	if err != nil {
		t.Fatal(err)
	}
	services := dc.Resource(schema.GroupVersionResource{Version: "v1", Resource: "services"}).Namespace("x")
	_, err = services.Get(t.Context(), "s:80", metav1.GetOptions{}, "proxy")
	if err == nil || !strings.Contains(err.Error(), "answered with a redirect to") {
		t.Errorf("client-go's GET through the service proxy: %v", err)
	}
	if got := other.Requests(); len(got) != 0 || other.Saw(aliceToken) {
		t.Errorf("the other host got %d requests, token among them: %v", len(got), other.Saw(aliceToken))
	}
	// A redirect back into the cluster is followed, through the hub: the
	// recording API server sees the hub's credentials, never alice's.
	pods := dc.Resource(schema.GroupVersionResource{Version: "v1", Resource: "pods"}).Namespace("x")
	cm, err := pods.Get(t.Context(), "p:80", metav1.GetOptions{}, "proxy")
	if err != nil || cm.GetName() != "c" {
		t.Errorf("client-go following a redirect within the cluster: %v %v", err, cm)
	}
	if api.Saw(aliceToken) {
		t.Error("the API server got alice's token")
	}
	var followed bool
	for _, r := range api.Requests() {
		followed = followed || r.Path == "/api/v1/namespaces/x/configmaps/c" && r.Bearer == "recording-service-account-token" && r.Header.Get("Impersonate-User") == "alice"
	}
	if !followed {
		t.Error("the redirect within the cluster was not followed through the hub, as alice")
	}
}
