package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// TestDev runs `tether dev` as the README says, uses the kubeconfig and the
// sign-in token it prints, checks that its cluster has controllers, and that
// Ctrl-C stops everything it started.
func TestDev(t *testing.T) {
	addr := freeAddr(t)
	p := start(t, "tether dev", nil, "dev", "--addr", addr)
	p.waitFor(t, 60*time.Second, "hub:              https://"+addr)
	p.waitFor(t, 20*time.Second, `A cluster is Ready component=hub cluster="dev" kubernetesVersion=v1.36.3`)
	kubeconfig := between(p.out.String(), "kubeconfig:       ", " (through the hub")
	if kubeconfig == "" {
		t.Fatalf("no kubeconfig path printed:\n%s", p.out)
	}
	dir := filepath.Dir(kubeconfig)
	// Both kubectls: the one built with the API server, and the machine's.
	for _, kubectl := range []string{cluster.Kubectl, "kubectl"} {
		out, err := exec.Command(kubectl, "--kubeconfig", kubeconfig, "get", "namespaces").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "kube-system") {
			t.Errorf("%s --kubeconfig %s get namespaces: %v\n%s", kubectl, kubeconfig, err, out)
		}
	}

	// The cluster has a controller manager: a Deployment makes its Pod, and
	// a deleted namespace goes (kubectl delete waits for it).
	kubectl := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(cluster.Kubectl, append([]string{"--kubeconfig", kubeconfig}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	kubectl("create", "namespace", "shop")
	kubectl("-n", "shop", "create", "deployment", "web", "--image=web:1")
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(kubectl("-n", "shop", "get", "pods", "-o", "name"), "pod/web-") {
		if time.Now().After(deadline) {
			t.Fatal("the Deployment made no Pod in 30 s")
		}
		time.Sleep(250 * time.Millisecond)
	}
	kubectl("delete", "namespace", "shop", "--timeout=60s")

	signInWithDevToken(t, "https://"+addr, kubeconfig, between(p.out.String(), "sign-in token:    ", " (paste"))
	devCAAndOutsideAgent(t, p.out.String(), "https://"+addr)

	p.signal(syscall.SIGINT)
	if code := p.exit(t, 30*time.Second); code != 0 {
		t.Errorf("tether dev exited %d on Ctrl-C, want 0", code)
	}
	p.waitFor(t, time.Second, "Stopped the Kubernetes API server")
	// Nothing it started is left running.
	if procs := processesMentioning(t, dir); len(procs) > 0 {
		t.Errorf("processes of %s still run: %q", dir, procs)
	}
}

// signInWithDevToken signs in to the fleet page at hubURL as a person would
// after reading `tether dev`'s output: it trusts the CA the kubeconfig
// carries, pastes what tokenFile holds into the sign-in form, and checks that
// the session it gets sees the "dev" cluster.
func signInWithDevToken(t *testing.T, hubURL, kubeconfig, tokenFile string) {
	t.Helper()
	if tokenFile == "" {
		t.Fatal("no sign-in token file printed")
	}
	if fi, err := os.Stat(tokenFile); err != nil {
		t.Fatal(err)
	} else if fi.Mode().Perm() != 0o600 {
		t.Errorf("the sign-in token file has mode %v; want it readable by its owner only (0600)", fi.Mode().Perm())
	}
	token, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	var kc struct {
		Clusters []struct {
			Cluster struct {
				CA string `json:"certificate-authority-data"`
			} `json:"cluster"`
		} `json:"clusters"`
	}
	if err := yaml.Unmarshal(raw, &kc); err != nil || len(kc.Clusters) != 1 {
		t.Fatalf("the kubeconfig: %v\n%s", err, raw)
	}
	caPEM, err := base64.StdEncoding.DecodeString(kc.Clusters[0].Cluster.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("no CA in the kubeconfig:\n%s", raw)
	}
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar, Timeout: 10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer client.CloseIdleConnections()

	// A wrong token is refused, so the check below means something.
	if code := postToken(t, client, hubURL, "x"+strings.TrimSpace(string(token))); code != http.StatusUnauthorized {
		t.Errorf("signing in with a wrong token answered %d, want 401", code)
	}
	if code := postToken(t, client, hubURL, string(token)); code != http.StatusOK {
		t.Fatalf("signing in with the printed token answered %d, want the fleet page (200)", code)
	}
	resp, err := client.Get(hubURL + "/api/clusters")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var clusters []struct {
		Name string `json:"name"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&clusters); resp.StatusCode != http.StatusOK || err != nil ||
		len(clusters) != 1 || clusters[0].Name != "dev" {
		t.Errorf("/api/clusters with the session: %s, %v, %+v; want the dev cluster", resp.Status, err, clusters)
	}
}

// postToken posts token to the sign-in form, as the page does, and returns
// the status of the page it ends on. The token goes as read from the file,
// line break and all, as a paste would carry it.
func postToken(t *testing.T, client *http.Client, hubURL, token string) int {
	t.Helper()
	form := url.Values{"token": {token}}.Encode()
	req, _ := http.NewRequest("POST", hubURL+"/login", strings.NewReader(form))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", hubURL)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// processesMentioning lists the command lines, from /proc, that contain s.
func processesMentioning(t *testing.T, s string) []string {
	t.Helper()
	cmdlines, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil || len(cmdlines) == 0 {
		t.Fatalf("can't list processes: %v", err)
	}
	var found []string
	for _, f := range cmdlines {
		b, err := os.ReadFile(f)
		if err == nil && strings.Contains(string(b), s) {
			found = append(found, strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return found
}

func between(s, from, to string) string {
	_, rest, ok := strings.Cut(s, from)
	if !ok {
		return ""
	}
	v, _, ok := strings.Cut(rest, to)
	if !ok {
		return ""
	}
	return v
}

// devCAAndOutsideAgent checks what `tether dev` prints for tools other than
// kubectl: the hub's CA in a file of its own, which an HTTPS client trusts
// the hub with, and the command that runs an agent outside a pod against its
// API server, which run as printed (for another hub) makes that hub's
// cluster Ready.
func devCAAndOutsideAgent(t *testing.T, out, hubURL string) {
	t.Helper()
	caFile := between(out, "hub CA:           ", " (")
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatalf("the hub CA printed, %q: %v", caFile, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("no certificate in %s", caFile)
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := client.Get(hubURL + "/healthz")
	if err != nil {
		t.Fatalf("GET /healthz trusting only %s: %v", caFile, err)
	}
	resp.Body.Close()
	client.CloseIdleConnections()

	line := between(out, "TETHER_AGENT_TOKEN for its hub):\n  ", " tether agent\n")
	if line == "" {
		t.Fatalf("no command for an agent outside a pod printed:\n%s", out)
	}
	env := map[string]string{}
	for _, kv := range strings.Fields(line) {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	if fi, err := os.Stat(filepath.Join(env["TETHER_SERVICEACCOUNT_DIR"], "token")); err != nil || fi.Size() == 0 {
		t.Errorf("the service account directory printed has no token: %v", err)
	}
	h, otherHub := hub(t, nil, "outside")
	env["TETHER_HUB_URL"], env["TETHER_AGENT_NAME"], env["TETHER_AGENT_TOKEN"] = otherHub, "outside", agentToken
	env["TETHER_HUB_CA"] = hubCAFile(t)
	start(t, "agent outside", env, "agent")
	h.waitFor(t, 15*time.Second, `A cluster is Ready cluster="outside"`)
}
