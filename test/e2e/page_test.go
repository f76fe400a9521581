package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tetherhq/tether/internal/testutil/browser"
)

// TestKubeconfigFromThePage signs in to the real hub's fleet page in a
// headless Chromium, downloads the kubeconfig the page offers, and uses it
// with kubectl through the real agent and API server.
func TestKubeconfigFromThePage(t *testing.T) {
	setUpPeople(t, "team-a", "team-b")
	admin(t, "create", "configmap", "from-page", "-n", "team-a", "--from-literal=k=v")
	_, hubURL := hub(t, nil, "e2e")
	a := agent(t, "e2e", hubURL, agentToken)
	a.waitFor(t, 10*time.Second, `Connected to `+hubURL+` as "e2e"`)

	// The hub's certificate is from the tests' own CA, which the browser
	// can't be told about.
	ctx := browser.New(t, chromedp.IgnoreCertErrors)
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(sctx,
		chromedp.Navigate(hubURL+"/"),
		chromedp.SendKeys(chromedp.CSS("#token"), aliceToken+"\r"),
		chromedp.WaitVisible(chromedp.CSS(`.card[data-name="e2e"]`)),
		chromedp.Poll[chromedp.Void](`document.querySelector('.card[data-name="e2e"] .status .text').textContent === "Ready"`),
	); err != nil {
		browser.Screenshot(t, ctx, "failed")
		t.Fatal(err)
	}
	browser.Screenshot(t, ctx, "fleet")
	kubeconfig, err := chromedp.Run(sctx, chromedp.Evaluate[string](`fetch(document.getElementById('kubeconfig').href).then(r => r.text())`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(f, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := kubectl(t, f, "get", "configmap", "from-page", "-n", "team-a", "-o", "jsonpath={.data.k}"); err != nil || out != "v" {
		t.Fatalf("kubectl with the page's kubeconfig: %v\n%s\n%s", err, out, kubeconfig)
	}
	if out, err := kubectl(t, f, "get", "configmaps", "-n", "team-b"); err == nil || !strings.Contains(out, `User "alice" cannot list`) {
		t.Errorf("the page's kubeconfig is alice's, under her RBAC: %v\n%s", err, out)
	}

	// Over TLS the session cookie is Secure, HttpOnly and SameSite=Lax, and
	// its name's prefix keeps other hosts from planting one (the browser
	// above took it).
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(hubCA.CertPEM)
	client := &http.Client{
		Transport:     &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	req, _ := http.NewRequest("POST", hubURL+"/login", strings.NewReader("token="+aliceToken))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", hubURL)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if c := resp.Header.Get("Set-Cookie"); !strings.HasPrefix(c, "__Host-tether_session=") || !strings.Contains(c, "; Secure") || !strings.Contains(c, "HttpOnly") || !strings.Contains(c, "SameSite=Lax") {
		t.Errorf("the session cookie over TLS: %q", c)
	}
}
