package e2e

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tetherhq/tether/internal/testutil/browser"
	"github.com/tetherhq/tether/internal/testutil/ptytest"
)

// TestLoginBrowser: tether login opens the hub's page (a $BROWSER that
// starts, while the test's Chromium opens the address the command
// prints), alice signs in there, and the command gets her token on its
// loopback listener; real kubectl then runs tether credential with it.
// Once the token expires, kubectl without a terminal is told to run
// tether login: no browser opens where no one can answer it; on a
// terminal, tether credential signs her in again in the browser and
// kubectl's command then succeeds.
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
	target := loginAddress(t, stderr, hubURL, cmd.Wait)

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

	// On a terminal kubectl lets tether credential ask: it prints the
	// address again, the browser (still signed in) hands the command a new
	// code, and the command kubectl ran goes through.
	ptm, pts, err := ptytest.Open(24, 80)
	if err != nil {
		t.Fatal(err)
	}
	defer ptm.Close()
	kctx, kcancel := context.WithTimeout(context.Background(), time.Minute)
	defer kcancel()
	kc := cluster.KubectlCommand(kctx, b.kubeconfig, "--context", ctxName, "get", "configmap", "from-browser", "-n", readable, "-o", "jsonpath={.data.k}")
	kc.Env = append(kc.Env, "XDG_CACHE_HOME="+b.cacheHome, "BROWSER=true")
	kc.Stdin = pts
	var kout strings.Builder
	kc.Stdout = &kout
	kerr, err := kc.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := kc.Start(); err != nil {
		t.Fatal(err)
	}
	pts.Close()
	again := loginAddress(t, kerr, hubURL, kc.Wait)
	actx, acancel := context.WithTimeout(bctx, 30*time.Second)
	defer acancel()
	if err := chromedp.Do(actx, chromedp.Navigate(again),
		chromedp.WaitVisible(`//p[contains(., "tether login is signed in")]`)); err != nil {
		browser.Screenshot(t, bctx, "failed-again")
		t.Fatalf("signing in again in Chromium: %v", err)
	}
	if err := kc.Wait(); err != nil || kout.String() != "v" {
		t.Fatalf("kubectl on a terminal, after signing in again: %v: %q", err, kout.String())
	}
	if c := b.cached(t, hubURL); c["token"] == cached["token"] {
		t.Errorf("the cached token is the expired one still")
	}
}

// loginAddress reads, from what tether login or tether credential says,
// the hub's address it asks the browser to open; then it reads on, so the
// command never blocks writing. wait ends the command if it printed none.
func loginAddress(t *testing.T, said io.Reader, hubURL string, wait func() error) string {
	t.Helper()
	var all strings.Builder
	sc := bufio.NewScanner(said)
	for sc.Scan() {
		all.WriteString(sc.Text() + "\n")
		if s := strings.TrimSpace(sc.Text()); strings.HasPrefix(s, hubURL+"/login/cli?") {
			go func() {
				for sc.Scan() {
				}
			}()
			return s
		}
	}
	wait()
	t.Fatalf("no address to open was printed:\n%s", all.String())
	return ""
}
