package server

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/listfile"
	"github.com/tetherhq/tether/internal/logging"
	"github.com/tetherhq/tether/internal/pki"
	"github.com/tetherhq/tether/internal/protocol"
	"github.com/tetherhq/tether/internal/testutil/fakecluster"
	"github.com/tetherhq/tether/internal/testutil/syncbuf"
)

// TestClusterTheHubReaches: a cluster of TETHER_FLEET_CLUSTERS, with no
// agent in it, is listed, probed and proxied like an agent's cluster: as
// the person, with the token from its file, checked against its CA as the
// host its server names; people outside its groups get 404.
func TestClusterTheHubReaches(t *testing.T) {
	fc := fakecluster.New(t)
	// A certificate for the address in the server URL only, as an API
	// server outside the cluster may have.
	cert, err := fc.CA.IssueTLS(pki.Leaf{CommonName: "kube-apiserver", Hosts: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	fc.Srv.TLS.Certificates = []tls.Certificate{cert}
	server := "https://" + strings.TrimPrefix(fc.Srv.URL, "https://")
	clusters := fmt.Sprintf("- name: staging\n  server: %s\n  caFile: %s\n  tokenFile: %s\n  labels: {env: staging}\n  groups: [platform]\n",
		server, filepath.Join(fc.SADir, "ca.crt"), filepath.Join(fc.SADir, "token"))
	// The hub serves TLS, and people's clients speak HTTP/2 to it, as
	// kubectl does, beside its own agents' connections in memory.
	base, hubCA, _, logs := tlsHub(t, map[string]string{
		"TETHER_PUBLIC_URL":     "https://hub.example.com",
		"TETHER_FLEET_CLUSTERS": clusters,
		"TETHER_FLEET_AGENTS":   fleet.AgentsEntry("eu-1", listfile.TokenSHA256(strings.Repeat("t", 32))),
		"TETHER_METRICS_ADDR":   "0",
		"TETHER_USERS": "- {name: ann, token: " + strings.Repeat("a", 32) + ", groups: [platform]}\n" +
			"- {name: bob, token: " + strings.Repeat("b", 32) + ", groups: [dev]}\n",
	})
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: hubCA.Pool()}, ForceAttemptHTTP2: true}}
	defer client.CloseIdleConnections()
	get := func(who, path string) (int, string) {
		req, _ := http.NewRequest("GET", base+path, nil)
		req.Header.Set("Authorization", "Bearer "+strings.Repeat(who, 32))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.ProtoMajor != 2 {
			t.Fatalf("%s over %s, not HTTP/2", path, resp.Proto)
		}
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	eventually(t, 10*time.Second, "staging is Ready", func() bool {
		code, body := get("a", "/api/clusters/staging")
		return code == 200 && strings.Contains(body, `"status":"Ready"`)
	})
	_, body := get("a", "/api/clusters/staging")
	var st struct {
		Labels            map[string]string `json:"labels"`
		KubernetesVersion string            `json:"kubernetesVersion"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil || st.KubernetesVersion != "v1.36.3-test" || st.Labels["env"] != "staging" {
		t.Errorf("staging: %s (%v)", body, err)
	}

	if code, body := get("a", "/api/kubeconfig"); code != 200 || !strings.Contains(body, base64.StdEncoding.EncodeToString(hubCA.CertPEM)) {
		t.Errorf("the kubeconfig doesn't carry the hub's CA: %d\n%s", code, body)
	}

	code, body := get("a", "/clusters/staging/api/v1/namespaces?limit=1")
	if code != 200 {
		t.Fatalf("through the hub: %d %s", code, body)
	}
	var echo struct {
		Path   string      `json:"path"`
		Header http.Header `json:"header"`
		Host   string      `json:"host"`
	}
	if err := json.Unmarshal([]byte(body), &echo); err != nil {
		t.Fatal(err)
	}
	if echo.Path != "/api/v1/namespaces?limit=1" || echo.Header.Get("Impersonate-User") != "ann" ||
		echo.Header.Get("Authorization") != "Bearer service-account-token-1" {
		t.Errorf("the API server got %s with %v", echo.Path, echo.Header)
	}
	// Addressed as its server URL names it, as kubectl pointed there would:
	// a proxy in front of it may route by Host.
	if want := strings.TrimPrefix(server, "https://"); echo.Host != want {
		t.Errorf("the API server got Host %q; want %q", echo.Host, want)
	}

	if code, _ := get("b", "/clusters/staging/api/v1/namespaces"); code != 404 {
		t.Errorf("someone outside staging's groups got %d, not 404", code)
	}
	if code, body := get("b", "/api/clusters/staging"); code != 404 {
		t.Errorf("someone outside staging's groups saw it: %d %s", code, body)
	}
	if !strings.Contains(logs.String(), `The agent of "staging" connected`) {
		t.Errorf("the hub's log doesn't say its own agent connected:\n%s", logs)
	}
}

// TestClustersAloneTakeNoAgents: a hub with TETHER_FLEET_CLUSTERS and no
// agents list serves its own clusters, and refuses every other agent with
// 403, as a hub without an agents list does, even one that names its
// cluster.
func TestClustersAloneTakeNoAgents(t *testing.T) {
	fc := fakecluster.New(t)
	server := "https://" + strings.TrimPrefix(fc.Srv.URL, "https://")
	opts := optionsOn(t, map[string]string{
		"TETHER_PUBLIC_URL": "http://hub.example.com",
		"TETHER_FLEET_CLUSTERS": fmt.Sprintf("- {name: staging, server: %s, caFile: %s, tokenFile: %s}\n",
			server, filepath.Join(fc.SADir, "ca.crt"), filepath.Join(fc.SADir, "token")),
		"TETHER_METRICS_ADDR": "0",
		"TETHER_USERS":        "- {name: ann, token: " + strings.Repeat("a", 32) + "}\n",
	})
	logs := serve(t, opts)
	base := "http://" + opts.Listener.Addr().String()
	eventually(t, 10*time.Second, "staging is Ready", func() bool {
		req, _ := http.NewRequest("GET", base+"/api/clusters/staging", nil)
		req.Header.Set("Authorization", "Bearer "+strings.Repeat("a", 32))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), `"status":"Ready"`)
	})
	req, _ := http.NewRequest("GET", base+"/api/agent", nil)
	req.Header.Set(protocol.AgentHeader, "staging")
	req.Header.Set("Authorization", "Bearer "+strings.Repeat("t", 32))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), "takes no agents") {
		t.Errorf("an outside agent got %d %q, want 403: the hub takes no agents", resp.StatusCode, b)
	}
	if !strings.Contains(logs.String(), "No agents list") {
		t.Errorf("the hub didn't warn that it has no agents list:\n%s", logs)
	}
}

// TestClusterTheHubCantRead: a cluster whose token or CA file is missing
// stops the hub at start with a line that names it and the file, and
// speaks of no pod: there is no agent.
func TestClusterTheHubCantRead(t *testing.T) {
	fc := fakecluster.New(t)
	missing := filepath.Join(t.TempDir(), "missing")
	for _, tc := range []struct{ ca, token, want string }{
		{filepath.Join(fc.SADir, "ca.crt"), missing, fmt.Sprintf(`TETHER_FLEET_CLUSTERS ("staging"): No token in %s: Tether needs it to speak to the API server`, missing)},
		{missing, filepath.Join(fc.SADir, "token"), fmt.Sprintf(`TETHER_FLEET_CLUSTERS ("staging"): No CA certificate at %s: Tether needs it to check the API server (no such file or directory)`, missing)},
	} {
		settings := map[string]string{
			"TETHER_PUBLIC_URL":     "http://hub.example.com",
			"TETHER_FLEET_CLUSTERS": fmt.Sprintf("- {name: staging, server: %q, caFile: %q, tokenFile: %q}\n", fc.Srv.URL, tc.ca, tc.token),
			"TETHER_METRICS_ADDR":   "0",
			"TETHER_USERS":          "- {name: ann, token: " + strings.Repeat("a", 32) + "}\n",
		}
		opts := optionsOn(t, settings)
		if err := Serve(context.Background(), opts, slog.New(slog.DiscardHandler), nil); err == nil || err.Error() != tc.want {
			t.Errorf("Serve: %v\nwant: %s", err, tc.want)
		}
	}
}

// optionsOn reads settings as the hub's environment, and gives the hub a
// listener of its own on 127.0.0.1.
// serve runs Serve with opts, its audit in a file, until the test ends, and
// returns its log.
func serve(t *testing.T, opts Options) *syncbuf.Buffer {
	t.Helper()
	opts.AuditFile = filepath.Join(t.TempDir(), "audit")
	logs := &syncbuf.Buffer{}
	log, _ := logging.New("text", logs, slog.LevelInfo)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, opts, log, nil) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return logs
}

func optionsOn(t *testing.T, settings map[string]string) Options {
	t.Helper()
	opts, err := OptionsFromEnv(func(k string) string { return settings[k] }, true)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	opts.Listener = ln
	return opts
}

func TestHostHeader(t *testing.T) {
	for server, want := range map[string]string{
		"api.example.com:443":  "api.example.com",
		"api.example.com:6443": "api.example.com:6443",
		"10.0.0.1:443":         "10.0.0.1",
		"[2001:db8::1]:443":    "[2001:db8::1]",
		"[2001:db8::1]:6443":   "[2001:db8::1]:6443",
	} {
		if got := hostHeader(server); got != want {
			t.Errorf("hostHeader(%q) = %q, want %q", server, got, want)
		}
	}
}
