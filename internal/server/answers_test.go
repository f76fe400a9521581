package server

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/testutil/fakecluster"
)

func TestBasePath(t *testing.T) {
	fc := fakecluster.New(t)
	h := startHub(t, Config{Agents: testAgents("eu-1"), BasePath: "/tether/"})
	a := startAgent(t, h.url+"/tether", "eu-1", fc)
	eventually(t, 5*time.Second, "connected below the base path", a.Connected)
	for _, path := range []string{"/healthz", "/readyz", "/tether/healthz", "/tether/readyz"} {
		if code, body := get(t, h.url+path); code != 200 || body != "ok\n" {
			t.Errorf("GET %s = %d %q", path, code, body)
		}
	}
	if code, _ := get(t, h.url+"/api/agent"); code != http.StatusNotFound {
		t.Errorf("the agent endpoint answers outside the base path: %d", code)
	}
	// The metrics name clusters: they are on TETHER_METRICS_ADDR only,
	// never on the public port (SPEC section 4).
	for _, path := range []string{"/metrics", "/tether/metrics"} {
		if code, body := get(t, h.url+path); code != http.StatusNotFound {
			t.Errorf("GET %s on the public port = %d %.100q, want 404", path, code, body)
		}
	}
	h.Close()
	if code, _ := get(t, h.url+"/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz of a closed hub = %d, want 503", code)
	}
}

// TestPathWithoutACluster: a Kubernetes API path that names no cluster, as
// kubectl 1.33 and older send for `get --raw` with the hub's kubeconfig,
// answers a Status that says what to send instead; the hub's own paths and
// the clusters' are as before.
func TestPathWithoutACluster(t *testing.T) {
	h, _ := proxyHub(t, fakecluster.New(t), "", func(c *Config) { c.BasePath = "/tether/" })
	for path, want := range map[string]string{
		"/version":                  "--raw /tether/clusters/<name>/version",
		"/tether/version":           "--raw /tether/clusters/<name>/version",
		"/api":                      "--raw /tether/clusters/<name>/api",
		"/tether/api/v1/namespaces": "--raw /tether/clusters/<name>/api/v1/namespaces",
		"/apis/apps/v1":             "--raw /tether/clusters/<name>/apis/apps/v1",
		"/tether/openapi/v3":        "--raw /tether/clusters/<name>/openapi/v3",
		"/tether/apis":              "--raw /tether/clusters/<name>/apis",
	} {
		code, body, hdr := call(t, "GET", h.url+path, aliceToken, nil)
		var status struct{ Kind, Reason, Message string }
		json.Unmarshal([]byte(body), &status)
		if code != http.StatusNotFound || hdr.Get("Content-Type") != "application/json" || status.Kind != "Status" || status.Reason != "NotFound" ||
			!strings.Contains(status.Message, "kubectl 1.34 or later") || !strings.HasSuffix(status.Message, want) {
			t.Errorf("GET %s = %d %s, want a 404 Status ending %q", path, code, body, want)
		}
	}
	if code, body, _ := call(t, "GET", h.url+"/tether/clusters/open/version", aliceToken, nil); code != http.StatusOK {
		t.Errorf("GET /tether/clusters/open/version = %d %.200s", code, body)
	}
	if code, body, _ := call(t, "GET", h.url+"/tether/api/clusters", aliceToken, nil); code != http.StatusOK || !strings.Contains(body, `"open"`) {
		t.Errorf("GET /tether/api/clusters = %d %.200s", code, body)
	}
	if code, body, _ := call(t, "GET", h.url+"/tether/api/nothing", aliceToken, nil); code != http.StatusNotFound || strings.Contains(body, "Status") {
		t.Errorf("GET /tether/api/nothing = %d %.200s, want net/http's 404: it isn't a Kubernetes path", code, body)
	}
}

// TestStatusBelow100: an API server's status 000 to 099 parses, but is no
// answer: the person gets a 503, not a connection the proxy's WriteHeader
// panicked on.
func TestStatusBelow100(t *testing.T) {
	fc := fakecluster.New(t)
	fc.Srv.Config.Handler.(*http.ServeMux).HandleFunc("/odd", func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 050 Odd\r\nContent-Length: 0\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		brw.Flush()
	})
	h, audit := proxyHub(t, fc, "")
	for _, method := range []string{"GET", "POST"} {
		c, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, method+" /clusters/open/odd HTTP/1.1\r\nHost: hub\r\nContent-Length: 0\r\nAuthorization: Bearer "+aliceToken+"\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		c.Close()
		if err != nil {
			t.Fatalf("%s: no answer at all from the hub (%v); audit: %s", method, err, audit)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("%s: answer %d, want 503; audit %s", method, resp.StatusCode, audit)
		}
	}
}
