package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

// loginBed is a person's machine: a cache directory and a kubeconfig of
// their own, and the token file they sign in with.
type loginBed struct {
	cacheHome  string // XDG_CACHE_HOME
	kubeconfig string
	tokenFile  string
	caFile     string
}

func newLoginBed(t *testing.T, token string) *loginBed {
	t.Helper()
	dir := t.TempDir()
	b := &loginBed{cacheHome: filepath.Join(dir, "cache"), kubeconfig: filepath.Join(dir, "kube", "config"),
		tokenFile: filepath.Join(dir, "token"), caFile: hubCAFile(t)}
	if err := os.WriteFile(b.tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return b
}

// tether runs a tether command as the person, with their $KUBECONFIG and
// cache directory.
func (b *loginBed) tether(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, tetherBin, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "XDG_CACHE_HOME=" + b.cacheHome, "KUBECONFIG=" + b.kubeconfig}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// kubectl runs the tests' kubectl with the person's kubeconfig, which runs
// `tether credential` with their cache directory.
func (b *loginBed) kubectl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := cluster.KubectlCommand(ctx, b.kubeconfig, args...)
	cmd.Env = append(cmd.Env, "XDG_CACHE_HOME="+b.cacheHome)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// cached reads the token file tether credential keeps for hubURL.
func (b *loginBed) cached(t *testing.T, hubURL string) map[string]any {
	t.Helper()
	host := strings.ReplaceAll(strings.TrimPrefix(hubURL, "https://"), ":", "_")
	path := filepath.Join(b.cacheHome, "tether", host, "token.json")
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %v, want 0600", path, fi.Mode().Perm())
	}
	data, _ := os.ReadFile(path)
	var c map[string]any
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

func (b *loginBed) setCached(t *testing.T, hubURL string, c map[string]any) {
	t.Helper()
	host := strings.ReplaceAll(strings.TrimPrefix(hubURL, "https://"), ":", "_")
	data, _ := json.Marshal(c)
	if err := os.WriteFile(filepath.Join(b.cacheHome, "tether", host, "token.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestLoginTokenFile: tether login with a static token writes a context
// per cluster into $KUBECONFIG beside what was there, and real kubectl
// runs tether credential for each command; an expired cached token, and
// one the hub refuses, are replaced, and kubectl's command succeeds.
func TestLoginTokenFile(t *testing.T) {
	admin(t, "create", "clusterrolebinding", "tether-admins", "--clusterrole=cluster-admin", "--group=tether:admins")
	_, hubURL := hub(t, nil, "login-e2e")
	a := agent(t, "login-e2e", hubURL, agentToken)
	a.waitFor(t, 10*time.Second, `Connected to `+hubURL+` as "login-e2e"`)
	b := newLoginBed(t, adminToken)

	// The person's kubeconfig already reaches the API server directly.
	own, err := os.ReadFile(cluster.AdminKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Dir(b.kubeconfig), 0o700)
	if err := os.WriteFile(b.kubeconfig, own, 0o600); err != nil {
		t.Fatal(err)
	}
	before, err := clientcmd.LoadFromFile(b.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}

	out, err := b.tether(t, "login", "--hub", hubURL, "--token-file", b.tokenFile, "--ca-file", b.caFile)
	if err != nil {
		t.Fatalf("tether login: %v\n%s", err, out)
	}
	ctxName := strings.TrimPrefix(hubURL, "https://") + "/login-e2e"
	if !strings.Contains(out, "kubectl --context "+ctxName+" get namespaces") {
		t.Errorf("tether login said:\n%s\nwant the command for context %s", out, ctxName)
	}
	after, err := clientcmd.LoadFromFile(b.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if after.CurrentContext != before.CurrentContext || after.Contexts[before.CurrentContext] == nil {
		t.Errorf("current context %q after login, want %q kept", after.CurrentContext, before.CurrentContext)
	}

	if out, err := b.kubectl(t, "--context", ctxName, "get", "namespaces", "-o", "name"); err != nil || !strings.Contains(out, "namespace/kube-system") {
		t.Fatalf("kubectl through the hub: %v\n%s", err, out)
	}
	// The person's own context still works, the hub's entries beside it.
	if out, err := b.kubectl(t, "get", "namespace", "default", "-o", "name"); err != nil || !strings.Contains(out, "namespace/default") {
		t.Errorf("kubectl with the kubeconfig's own context: %v\n%s", err, out)
	}
	first := b.cached(t, hubURL)
	if tok, _ := first["token"].(string); tok == "" || tok == adminToken {
		t.Fatalf("the cached token %q, want a hub-issued one", tok)
	}

	// Expired: tether credential signs in again with the token file.
	first["expires"] = time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	b.setCached(t, hubURL, first)
	if out, err := b.kubectl(t, "--context", ctxName, "get", "namespace", "default", "-o", "name"); err != nil || !strings.Contains(out, "namespace/default") {
		t.Fatalf("kubectl with an expired cached token: %v\n%s", err, out)
	}
	second := b.cached(t, hubURL)
	if second["token"] == first["token"] || second["expires"] == first["expires"] {
		t.Errorf("the expired token was not replaced: %v", second["expires"])
	}

	// Refused by the hub though not expired (a token it can't check, handed
	// out long ago): kubectl is answered 401, and client-go runs the plugin
	// again at once; the plugin, asked again within moments, checks with the
	// hub and signs in again. client-go doesn't repeat the refused request,
	// so that command fails; the next one has the new token.
	refused := second["token"].(string) + "x"
	second["token"] = refused
	second["served"] = time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	b.setCached(t, hubURL, second)
	if out, err := b.kubectl(t, "--context", ctxName, "get", "namespace", "default", "-o", "name"); err == nil || !strings.Contains(out, "Unauthorized") && !strings.Contains(out, "logged in") {
		t.Errorf("kubectl with a refused cached token: %v\n%s; want it refused", err, out)
	}
	if third := b.cached(t, hubURL); third["token"] == refused || third["token"] == "" {
		t.Error("the plugin, run again after the 401, didn't replace the refused token")
	}
	if out, err := b.kubectl(t, "--context", ctxName, "get", "namespace", "default", "-o", "name"); err != nil || !strings.Contains(out, "namespace/default") {
		t.Fatalf("kubectl after a refused token: %v\n%s", err, out)
	}

	// Logout: kubectl is told to sign in.
	if out, err := b.tether(t, "logout", "--hub", hubURL); err != nil || !strings.Contains(out, "Signed out of "+hubURL) {
		t.Fatalf("tether logout: %v\n%s", err, out)
	}
	if out, err := b.kubectl(t, "--context", ctxName, "get", "namespace", "default"); err == nil || !strings.Contains(out, "tether login --hub "+hubURL) {
		t.Errorf("kubectl after logout: %v\n%s; want an error saying to run tether login", err, out)
	}
}
