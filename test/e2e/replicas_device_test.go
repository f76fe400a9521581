package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestDeviceLoginBehindRoundRobin: `tether login --device` against three
// replicas behind round robin: the command's start and polls land on
// whichever replica, the person types the code on another, and the
// command is signed in, as with one hub.
func TestDeviceLoginBehindRoundRobin(t *testing.T) {
	rs := startReplicas(t, 3, "device-rr")
	agent(t, "device-rr", "https://"+rs.addrs[0], agentToken)
	within(t, 20*time.Second, "Ready on all three", func() bool { return rs.allReady(t, -1, "device-rr") })
	b := newLoginBed(t, adminToken)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, tetherBin, "login", "--hub", rs.url, "--ca-file", b.caFile, "--device")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "XDG_CACHE_HOME=" + b.cacheHome, "KUBECONFIG=" + b.kubeconfig}
	said, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	code := ""
	sc := bufio.NewScanner(said)
	for code == "" && sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		if _, after, ok := strings.Cut(sc.Text(), "enter the code "); ok {
			code = strings.TrimSpace(after)
		}
	}
	if code == "" {
		cmd.Wait()
		t.Fatalf("tether login --device showed no code:\n%s", out.String())
	}
	rest := make(chan struct{})
	go func() { // the rest of what it says, so it never blocks writing it
		defer close(rest)
		for sc.Scan() {
			out.WriteString(sc.Text() + "\n")
		}
	}()

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(hubCA.CertPEM)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer client.CloseIdleConnections()
	// On replica 1's own address: whichever replica made the code.
	req, _ := http.NewRequest("POST", "https://"+rs.addrs[1]+"/device",
		strings.NewReader(url.Values{"user_code": {code}, "decision": {"approve"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(page), "Signed in") {
		t.Fatalf("approving %s on replica 1: %d\n%s", code, resp.StatusCode, page)
	}
	<-rest // the command has ended, or closed its output
	err = cmd.Wait()
	if err != nil {
		t.Fatalf("tether login --device: %v\n%s", err, out.String())
	}
	// The cluster sees the person the token names (whom its RBAC may
	// still refuse: admin has no binding there).
	if got, err := b.kubectl(t, "--context", strings.TrimPrefix(rs.url, "https://")+"/device-rr", "get", "namespace", "default"); err != nil && !strings.Contains(got, `User "admin"`) {
		t.Errorf("kubectl with the device sign-in's token: %v\n%s", err, got)
	}
}
