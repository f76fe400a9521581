package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/testutil/syncbuf"
)

// staticKubeconfig writes a kubeconfig for cluster name on the hub at hubURL
// with a static user token, which works with any hub started from the same
// users list (a hub-issued token dies with the hub's key).
func staticKubeconfig(t *testing.T, hubURL, name, token string) string {
	t.Helper()
	dir := t.TempDir()
	ca := filepath.Join(dir, "hub-ca.pem")
	if err := os.WriteFile(ca, hubCA.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: %[1]s
  cluster: {server: %[2]q, certificate-authority: %[3]q}
users:
- name: u
  user: {token: %[4]q}
contexts:
- name: %[1]s
  context: {cluster: %[1]s, user: u}
current-context: %[1]s
`, name, hubURL+"/clusters/"+name, ca, token)
	f := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(f, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// background runs kubectl until the test ends, collecting its output.
type background struct {
	cmd  *exec.Cmd
	out  *syncbuf.Buffer
	done chan struct{}
	at   time.Time // when it exited
	err  error
}

func startKubectl(t *testing.T, kubeconfig string, stdin io.Reader, args ...string) *background {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	b := &background{cmd: cluster.KubectlCommand(ctx, kubeconfig, args...), out: &syncbuf.Buffer{}, done: make(chan struct{})}
	b.cmd.Stdout, b.cmd.Stderr, b.cmd.Stdin = b.out, b.out, stdin
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		b.err = b.cmd.Wait()
		b.at = time.Now()
		close(b.done)
	}()
	t.Cleanup(func() { cancel(); <-b.done })
	return b
}

// ended waits up to within for the command to end, and says when it did.
func (b *background) ended(t *testing.T, within time.Duration, what string) time.Time {
	t.Helper()
	select {
	case <-b.done:
		return b.at
	case <-time.After(within):
		t.Fatalf("%s still runs %s later; it printed:\n%s", what, within, b.out)
		return time.Time{}
	}
}

// TestHubRestartUnderKubectl: a hub restarting under a watch, an exec and a
// port-forward ends each of them promptly, and the same commands work again
// within 5 s of the hub being back.
func TestHubRestartUnderKubectl(t *testing.T) {
	ns := unique("restart")
	admin(t, "create", "namespace", ns)
	setUpPeople(t, "team-a", "team-b") // the tether:admins binding
	addr := freeAddr(t)
	extra := map[string]string{"TETHER_RECONNECT_SPREAD_SECONDS": "1", "TETHER_SHUTDOWN_GRACE_SECONDS": "1"}
	h, hubURL := hubAt(t, addr, extra, "e2e")
	a := agent(t, "e2e", hubURL, agentToken)
	a.waitFor(t, 10*time.Second, `Connected to `+hubURL+` as "e2e"`)
	kc := staticKubeconfig(t, hubURL, "e2e", adminToken)

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	podPort := freeAddr(t)
	createPod(t, ns, "shell", map[string]any{"command": []string{"sh", "-c", "while true; do sleep 1; done"}}, "Always")
	createPod(t, ns, "echo", map[string]any{"command": []string{exe}, "env": []map[string]any{{"name": echoAddrEnv, "value": podPort}}}, "Never")
	if out, err := kubectl(t, kc, "wait", "-n", ns, "pod/shell", "pod/echo", "--for=condition=Ready", "--timeout=60s"); err != nil {
		t.Fatalf("wait: %v %s", err, out)
	}
	_, port, _ := net.SplitHostPort(podPort)

	// works starts the three, checks each works, and returns them.
	works := func(t *testing.T) (watch, execSession, pf *background, stdin *os.File) {
		t.Helper()
		watch = startKubectl(t, kc, nil, "get", "pods", "-n", ns, "--watch", "--request-timeout=0")
		waitOutput(t, watch.out, "shell")
		// An *os.File, so Wait doesn't wait for a goroutine copying stdin.
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		execSession = startKubectl(t, kc, r, "exec", "-i", "-n", ns, "shell", "--", "cat")
		r.Close()
		io.WriteString(w, "ping\n")
		waitOutput(t, execSession.out, "ping")
		local := freeAddr(t)
		_, localPort, _ := net.SplitHostPort(local)
		pf = startKubectl(t, kc, nil, "port-forward", "-n", ns, "pod/echo", localPort+":"+port)
		waitOutput(t, pf.out, "Forwarding from 127.0.0.1:"+localPort)
		if got := echoThrough(t, local, "hello"); got != "hello" {
			t.Fatalf("port-forward echoed %q", got)
		}
		return watch, execSession, pf, w
	}
	watch, execSession, pf, stdin := works(t)
	defer stdin.Close()

	stoppedAt := time.Now()
	h.signal(syscall.SIGTERM)
	if code := h.exit(t, 30*time.Second); code != 0 {
		t.Fatalf("the hub exited %d", code)
	}
	hubGone := time.Since(stoppedAt)
	// Started again at once, as a restart would.
	h2, _ := hubAt(t, addr, extra, "e2e")
	back := time.Now()
	for _, c := range []struct {
		b    *background
		name string
	}{{watch, "kubectl get --watch"}, {execSession, "kubectl exec"}, {pf, "kubectl port-forward"}} {
		if c.name == "kubectl port-forward" {
			// port-forward notices when it next uses its connection.
			if got := echoThrough(t, between(c.b.out.String(), "Forwarding from ", " ->"), "x"); got != "" {
				t.Logf("port-forward echoed %q across the restart", got)
			}
		}
		end := c.b.ended(t, 15*time.Second, c.name)
		t.Logf("%s ended %s after the hub was told to stop (the hub took %s, with a 1 s grace): %v",
			c.name, end.Sub(stoppedAt).Round(time.Millisecond), hubGone.Round(time.Millisecond), c.b.err)
	}

	deadline := back.Add(30 * time.Second)
	for {
		if out, err := kubectl(t, kc, "get", "namespace", ns, "-o", "name"); err == nil && strings.TrimSpace(out) == "namespace/"+ns {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kubectl doesn't work 30 s after the hub is back:\n%s\n%s", h2.out, a.out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	again := time.Since(back)
	t.Logf("kubectl works again %s after the new hub listens", again.Round(time.Millisecond))
	if again > 5*time.Second {
		t.Errorf("kubectl worked again only %s after the hub was back, want within 5 s", again)
	}
	_, _, _, stdin2 := works(t)
	stdin2.Close()
}

// echoThrough sends msg through a port-forward's local address and reads the
// echo; "" when it can't.
func echoThrough(t *testing.T, addr, msg string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return ""
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	c.Write([]byte(msg))
	c.(*net.TCPConn).CloseWrite()
	got, _ := io.ReadAll(c)
	return string(got)
}

// TestAgentKilledDuringRequests: kill -9 the agent while 100 watches are
// open through it; each fails (an error, not a clean end) promptly, new
// requests fail at once, and the hub's streams-open metric goes back to 0
// with opened equal to closed.
func TestAgentKilledDuringRequests(t *testing.T) {
	setUpPeople(t, "team-a", "team-b") // the tether:admins binding, whichever test runs first
	metricsAddr := freeAddr(t)
	_, hubURL := hub(t, map[string]string{"TETHER_METRICS_ADDR": metricsAddr}, "killed")
	a := agent(t, "killed", hubURL, agentToken)
	a.waitFor(t, 10*time.Second, `Connected to `+hubURL+` as "killed"`)

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(hubCA.CertPEM)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, MaxIdleConnsPerHost: -1}}
	get := func(ctx context.Context, path string) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, "GET", hubURL+"/clusters/killed"+path, nil)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		return client.Do(req)
	}
	const n = 100
	var opened sync.WaitGroup
	opened.Add(n)
	type end struct {
		at  time.Time
		err error // how the watch's answer ended: an error, not a clean end
	}
	ended := make(chan end, n)
	for range n {
		go func() {
			resp, err := get(context.Background(), "/api/v1/namespaces?watch=true")
			if err != nil || resp.StatusCode != 200 {
				opened.Done()
				ended <- end{}
				return
			}
			r := bufio.NewReader(resp.Body)
			r.ReadString('\n') // the first event: the watch is open
			opened.Done()
			_, err = io.Copy(io.Discard, r)
			resp.Body.Close()
			ended <- end{time.Now(), err}
		}()
	}
	opened.Wait()
	if got := metric(t, metricsAddr, "tether_streams_open"); got < n {
		t.Fatalf("streams open = %v with %d watches open", got, n)
	}

	killedAt := time.Now()
	a.cmd.Process.Signal(syscall.SIGKILL)
	var last time.Duration
	clean := 0
	for range n {
		select {
		case e := <-ended:
			if e.at.IsZero() {
				t.Fatal("a watch failed before the kill")
			}
			if e.err == nil {
				clean++
			}
			last = max(last, e.at.Sub(killedAt))
		case <-time.After(30 * time.Second):
			t.Fatal("a watch hangs after its agent was killed")
		}
	}
	// A watch that ended cleanly would look to its client like one the API
	// server ended, not like the failure it is.
	if clean > 0 {
		t.Errorf("%d of %d watches ended cleanly when their agent was killed; want each to fail", clean, n)
	}
	start := time.Now()
	resp, err := get(context.Background(), "/api/v1/namespaces")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a request after the kill: %d, want 503", resp.StatusCode)
	}
	t.Logf("all %d watches ended within %s of kill -9; a new request got %d in %s",
		n, last.Round(time.Millisecond), resp.StatusCode, time.Since(start).Round(time.Millisecond))
	deadline := time.Now().Add(30 * time.Second)
	for {
		open, o, c := metric(t, metricsAddr, "tether_streams_open"), metric(t, metricsAddr, "tether_streams_opened_total"), metric(t, metricsAddr, "tether_streams_closed_total")
		if open == 0 && o == c {
			t.Logf("streams open 0; opened %v = closed %v", o, c)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s after the kill: streams open %v, opened %v, closed %v", open, o, c)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// metric reads one unlabelled metric from the hub's /metrics.
func metric(t *testing.T, addr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
