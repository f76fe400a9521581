package e2e

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/pki"

	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/listfile"
	"github.com/tetherhq/tether/internal/testutil/faultproxy"
)

const agentToken = "e2e-agent-token-0123456789abcdef0123456789abcdef"

// hub starts `tether hub` admitting the named clusters with agentToken.
func hub(t *testing.T, extra map[string]string, names ...string) (*proc, string) {
	t.Helper()
	return hubAt(t, freeAddr(t), extra, names...)
}

// hubAt is hub listening on addr, so a test can start it again there.
func hubAt(t *testing.T, addr string, extra map[string]string, names ...string) (*proc, string) {
	t.Helper()
	var list strings.Builder
	for _, n := range names {
		list.WriteString(fleet.AgentsEntry(n, listfile.TokenSHA256(agentToken)))
	}
	certFile, keyFile := hubCert(t)
	env := map[string]string{
		"TETHER_ADDR":              addr,
		"TETHER_PUBLIC_URL":        "https://" + addr,
		"TETHER_TLS_CERT_FILE":     certFile,
		"TETHER_TLS_KEY_FILE":      keyFile,
		"TETHER_METRICS_ADDR":      "0",
		"TETHER_FLEET_AGENTS":      list.String(),
		"TETHER_HEARTBEAT_SECONDS": "1",
		"TETHER_USERS":             testUsers,
	}
	for k, v := range extra {
		env[k] = v
	}
	h := start(t, "hub", env, "hub")
	h.waitFor(t, 10*time.Second, "Tether hub listening")
	return h, "https://" + addr
}

// hubCert writes a certificate for 127.0.0.1 from hubCA, followed by the CA,
// and its key.
func hubCert(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	cert, key, err := hubCA.Issue(pki.Leaf{CommonName: "e2e hub", Hosts: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "hub.crt"), filepath.Join(dir, "hub.key")
	if err := os.WriteFile(certFile, append(cert, hubCA.CertPEM...), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// hubCAFile writes hubCA's certificate for agents' TETHER_HUB_CA.
func hubCAFile(t *testing.T) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "hub-ca.pem")
	if err := os.WriteFile(f, hubCA.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// agent starts `tether agent` for the test cluster.
func agent(t *testing.T, name, hubURL, token string) *proc {
	t.Helper()
	return agentAs(t, name, hubURL, token, cluster.ServiceAccountDir)
}

// agentAs starts `tether agent` with the service account token and CA in
// saDir, laid out as in a pod.
func agentAs(t *testing.T, name, hubURL, token, saDir string) *proc {
	t.Helper()
	return start(t, "agent "+name, agentEnv(t, name, hubURL, token, saDir), "agent")
}

// agentEnv is the environment of an agent for the test cluster.
func agentEnv(t *testing.T, name, hubURL, token, saDir string) map[string]string {
	return map[string]string{
		"TETHER_HUB_URL":            hubURL,
		"TETHER_AGENT_NAME":         name,
		"TETHER_AGENT_TOKEN":        token,
		"TETHER_HEALTH_ADDR":        "0",
		"TETHER_HUB_CA":             hubCAFile(t),
		"TETHER_SERVICEACCOUNT_DIR": saDir,
		"KUBERNETES_SERVICE_HOST":   cluster.Host,
		"KUBERNETES_SERVICE_PORT":   cluster.Port,
	}
}

func TestAgentMakesTheClusterReady(t *testing.T) {
	h, hubURL := hub(t, nil, "ready")
	a := agent(t, "ready", hubURL, agentToken)
	a.waitFor(t, 10*time.Second, `Connected to `+hubURL+` as "ready"`)
	h.waitFor(t, 10*time.Second, `The agent of "ready" connected (Tether `)
	h.waitFor(t, 15*time.Second, `A cluster is Ready cluster="ready" kubernetesVersion=`+cluster.Version)
	if cluster.Version != "v1.36.3" {
		t.Errorf("the test API server is %s, want v1.36.3", cluster.Version)
	}

	// The probe went through the tunnel and reached the API server as the
	// agent's service account: the API server's own audit log says so.
	if !auditHas(t, requestBy(cluster.ServiceAccountName, "/version")) || !auditHas(t, requestBy(cluster.ServiceAccountName, "/readyz")) {
		t.Errorf("the audit log has no /version and /readyz from %s", cluster.ServiceAccountName)
	}

	a.signal(syscall.SIGTERM)
	if code := a.exit(t, 10*time.Second); code != 0 {
		t.Errorf("the agent exited %d on SIGTERM, want 0", code)
	}
	h.waitFor(t, 5*time.Second, `The agent of "ready" disconnected`)
	h.waitFor(t, 5*time.Second, `A cluster is Unreachable cluster="ready" why="Its agent isn't connected."`)

	h.signal(syscall.SIGTERM)
	if code := h.exit(t, 40*time.Second); code != 0 {
		t.Errorf("the hub exited %d on SIGTERM, want 0", code)
	}
	h.waitFor(t, time.Second, "The hub has stopped")
	noSecrets(t, h, a)
}

// auditEvent is what the tests read of the API server's audit events.
type auditEvent struct {
	RequestURI string `json:"requestURI"`
	User       struct {
		Username string `json:"username"`
	} `json:"user"`
	ImpersonatedUser struct {
		Username string              `json:"username"`
		Extra    map[string][]string `json:"extra"`
	} `json:"impersonatedUser"`
}

// auditHas reports whether an event in the API server's audit log matches.
func auditHas(t *testing.T, match func(auditEvent) bool) bool {
	t.Helper()
	f, err := os.Open(cluster.AuditLogPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var e auditEvent
		if json.Unmarshal(sc.Bytes(), &e) == nil && match(e) {
			return true
		}
	}
	return false
}

// requestBy matches a request for path by user.
func requestBy(user, path string) func(auditEvent) bool {
	return func(e auditEvent) bool { return e.User.Username == user && e.RequestURI == path }
}

func noSecrets(t *testing.T, procs ...*proc) {
	t.Helper()
	sa, err := os.ReadFile(cluster.ServiceAccountDir + "/token")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		out := p.out.String()
		for _, secret := range []string{agentToken, strings.TrimSpace(string(sa))} {
			if strings.Contains(out, secret) {
				t.Errorf("%s printed a secret", p.name)
			}
		}
	}
}

func TestRefusedAgentsStop(t *testing.T) {
	h, hubURL := hub(t, nil, "known")
	tests := []struct {
		name, agent, token, hubLog string
	}{
		{"wrong token", "known", "a-wrong-token-0123456789abcdef0123456789", `An agent was refused: "known", with a token that doesn't match`},
		{"unknown name", "stranger", agentToken, `An agent was refused: "stranger", with a token that doesn't match`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := agent(t, tt.agent, hubURL, tt.token)
			if code := a.exit(t, 10*time.Second); code == 0 {
				t.Errorf("the refused agent exited 0")
			}
			a.waitFor(t, time.Second, "The hub at "+hubURL+" refused this agent: it doesn't know this name and token.")
			h.waitFor(t, 5*time.Second, tt.hubLog)
			if strings.Contains(h.out.String()+a.out.String(), tt.token) {
				t.Error("a log holds the token tried")
			}
		})
	}
	noSecrets(t, h)

	t.Run("no agents list", func(t *testing.T) {
		_, bare := hub(t, map[string]string{"TETHER_FLEET_AGENTS": ""})
		a := agent(t, "known", bare, agentToken)
		if code := a.exit(t, 10*time.Second); code == 0 {
			t.Errorf("the refused agent exited 0")
		}
		a.waitFor(t, time.Second, "The hub at "+bare+" refused this agent: it takes no agents")
	})
}

func TestTakeover(t *testing.T) {
	h, hubURL := hub(t, nil, "twin")
	first := agent(t, "twin", hubURL, agentToken)
	first.waitFor(t, 10*time.Second, `Connected to `+hubURL+` as "twin"`)
	second := agent(t, "twin", hubURL, agentToken)
	if code := first.exit(t, 10*time.Second); code == 0 {
		t.Errorf("the agent taken over exited 0")
	}
	first.waitFor(t, time.Second, "The hub at "+hubURL+" refused this agent: another agent connected as it (do two clusters use the same name and token?).")
	second.waitFor(t, 5*time.Second, `Connected to `+hubURL+` as "twin"`)
	h.waitFor(t, 5*time.Second, `An agent was taken over by another agent with the same name and token agent="twin"`)
}

func TestBadSettingsStopTheAgentAtOnce(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"no hub URL", map[string]string{}, "TETHER_HUB_URL must be set\n"},
		{"hub URL without scheme", map[string]string{"TETHER_HUB_URL": "tether.example.com"},
			"TETHER_HUB_URL must be the hub's address, like https://tether.example.com, not \"tether.example.com\"\n"},
		{"no service account", map[string]string{"TETHER_HUB_URL": "https://h.example.com", "TETHER_AGENT_TOKEN": agentToken,
			"KUBERNETES_SERVICE_HOST": "10.0.0.1", "TETHER_SERVICEACCOUNT_DIR": t.TempDir()},
			"No service account token in "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := start(t, "agent", tt.env, "agent")
			if code := p.exit(t, 10*time.Second); code == 0 {
				t.Fatal("exit status 0")
			}
			out := p.out.String()
			if !strings.HasPrefix(out, tt.want) || strings.Count(out, "\n") != 1 {
				t.Errorf("printed %q, want one line starting %q", out, tt.want)
			}
		})
	}
}

func TestSilentDropReconnects(t *testing.T) {
	h, hubURL := hub(t, nil, "quiet")
	p, err := faultproxy.New(strings.TrimPrefix(hubURL, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	viaProxy := "https://" + p.Addr()
	a := agent(t, "quiet", viaProxy, agentToken)
	a.waitFor(t, 10*time.Second, `Connected to `+viaProxy+` as "quiet"`)

	p.SetBlackhole(true)
	a.waitFor(t, 10*time.Second, "Nothing from the hub in 3 s")
	h.waitFor(t, 10*time.Second, `The agent of "quiet" disconnected`)
	p.SetBlackhole(false)
	// The agent's second "Connected" line.
	deadline := time.Now().Add(40 * time.Second)
	for strings.Count(a.out.String(), `Connected to `+viaProxy+` as "quiet"`) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the agent did not reconnect once the path was back:\n%s", a.out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
