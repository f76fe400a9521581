package e2e

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tetherhq/tether/internal/testutil/browser"
)

// TestLoginBrowser: tether login opens the hub's page (a $BROWSER that
// starts, while the test's Chromium opens the address the command
// prints), alice signs in there, and the command gets her token on its
// loopback listener; real kubectl then runs tether credential with it.
// Once the token expires, kubectl without a terminal is told to run
// tether login: no browser opens where no one can answer it.
func TestLoginBrowser(t *testing.T) {
	readable, hidden := unique("login-b"), unique("login-h")
	setUpPeople(t, readable, hidden)
	admin(t, "create", "configmap", "from-browser", "-n", readable, "--from-literal=k=v")
	_, hubURL := hub(t, nil, "login-browser")
	a := agent(t, "login-browser", hubURL, agentToken)
	a.waitFor(t, 10*time.Second, `Connected to `+hubURL+` as "login-browser"`)
	b := newLoginBed(t, aliceToken)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, tetherBin, "login", "--hub", hubURL, "--ca-file", b.caFile)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "XDG_CACHE_HOME=" + b.cacheHome,
		"KUBECONFIG=" + b.kubeconfig, "BROWSER=true"}
	var out strings.Builder
	cmd.Stdout = &out
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var said strings.Builder
	target := ""
	for sc := bufio.NewScanner(stderr); target == "" && sc.Scan(); {
		said.WriteString(sc.Text() + "\n")
		if s := strings.TrimSpace(sc.Text()); strings.HasPrefix(s, hubURL+"/login/cli?") {
			target = s
		}
	}
	if target == "" {
		cmd.Wait()
		t.Fatalf("tether login printed no address to open:\n%s", said.String())
	}
	go func() { // the rest of what it says, so it never blocks writing it
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
		}
	}()

	bctx := browser.New(t, chromedp.IgnoreCertErrors)
	sctx, scancel := context.WithTimeout(bctx, 30*time.Second)
	defer scancel()
	if err := chromedp.Do(sctx, chromedp.Navigate(target),
		chromedp.SendKeys(chromedp.CSS("#token"), aliceToken+"\r"),
		chromedp.WaitVisible(`//p[contains(., "tether login is signed in")]`)); err != nil {
		browser.Screenshot(t, bctx, "failed")
		t.Fatalf("signing in in Chromium: %v", err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("tether login: %v\n%s", err, out.String())
	}
	ctxName := strings.TrimPrefix(hubURL, "https://") + "/login-browser"
	if !strings.Contains(out.String(), ctxName) {
		t.Errorf("tether login said:\n%s\nwant context %s", out.String(), ctxName)
	}
	cached := b.cached(t, hubURL)
	if cached["method"] != "browser" {
		t.Errorf("cached method %v, want browser", cached["method"])
	}
	if got, err := b.kubectl(t, "--context", ctxName, "get", "configmap", "from-browser", "-n", readable, "-o", "jsonpath={.data.k}"); err != nil || got != "v" {
		t.Fatalf("kubectl with the browser's sign-in: %v\n%s", err, got)
	}
	if got, err := b.kubectl(t, "--context", ctxName, "get", "configmaps", "-n", hidden); err == nil || !strings.Contains(got, `User "alice" cannot list`) {
		t.Errorf("the sign-in is alice's, under her RBAC: %v\n%s", err, got)
	}

	cached["expires"] = time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	b.setCached(t, hubURL, cached)
	if got, err := b.kubectl(t, "--context", ctxName, "get", "namespace", "default"); err == nil || !strings.Contains(got, "run tether login --hub "+hubURL) {
		t.Errorf("kubectl without a terminal, the sign-in expired: %v\n%s\nwant it told to run tether login", err, got)
	}
}
