package hub

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tetherhq/tether/internal/testutil/browser"
)

// TestFleetPage drives the fleet page in a real headless Chromium: sign in
// with a static token, see exactly one's clusters, watch a card follow its
// agent without a reload, filter by label, and download a kubeconfig.
func TestFleetPage(t *testing.T) {
	fc := newFakeCluster(t)
	h, _ := proxyHub(t, fc, "")
	// The browser opens the hub at its test address, and the hub refuses
	// sign-ins from any origin but its own public one.
	h.cfg.PublicURL = h.url
	eventually(t, 5*time.Second, "open is Ready", func() bool { return statusOf(h, "open") == "Ready" })
	ctx := browser.New(t)
	step := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, actions...); err != nil {
			browser.Screenshot(t, ctx, "failed")
			t.Fatalf("%s: %v", what, err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return s
	}
	eval := func(js string, opts ...chromedp.EvaluateOption) string {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		s, err := chromedp.Run(sctx, chromedp.Evaluate[string](js, opts...))
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		return s
	}

	step("open the sign-in page", chromedp.Navigate(h.url+"/"))
	browser.Screenshot(t, ctx, "sign-in")
	// With the keyboard alone: the token field has the focus; Enter submits.
	step("sign in", chromedp.KeyEvent(aliceToken+"\r"), chromedp.WaitVisible(chromedp.CSS(".card")))
	if got := eval(`Array.from(document.querySelectorAll('.card')).map(c => c.dataset.name).join(',')`); got != "far,open" {
		t.Fatalf("alice sees cards %q, want far,open", got)
	}
	if got := text(`.card[data-name="open"] .status .text`); got != "Ready" {
		t.Errorf("open's status line: %q", got)
	}
	browser.Screenshot(t, ctx, "fleet")

	// The agent of "open" stops: its card says so within 3 s, no reload.
	h.agents["open"].stop(t)
	step("open turns Unreachable", chromedp.Poll[chromedp.Void](`document.querySelector('.card[data-name="open"] .status .text').textContent === "Unreachable: Its agent isn't connected."`, chromedp.WithPollingTimeout(3*time.Second)))
	if icon := text(`.card[data-name="open"] .icon`); icon != "✖" {
		t.Errorf("an unreachable card's icon is %q: status must show by more than colour", icon)
	}
	browser.Screenshot(t, ctx, "unreachable")
	again := startAgent(t, h.url, "open", fc)
	eventually(t, 5*time.Second, "open's agent is back", again.Connected)
	step("open turns Ready again", chromedp.Poll[chromedp.Void](`document.querySelector('.card[data-name="open"] .status .text').textContent === "Ready"`, chromedp.WithPollingTimeout(5*time.Second)))

	// The cluster page has the status history: Ready, Unreachable, Ready.
	step("open the cluster page", chromedp.Click(chromedp.CSS(`.card[data-name="open"] a.name`)), chromedp.WaitVisible(chromedp.CSS("#history")))
	history := eval(`Array.from(document.querySelectorAll('#history tbody td:nth-child(2)')).map(td => td.textContent).join('|')`)
	if history != "Ready|Unreachable: Its agent isn't connected.|Ready" {
		t.Errorf("status history, newest first: %q", history)
	}
	browser.Screenshot(t, ctx, "cluster")
	step("back to the fleet", chromedp.Navigate(h.url+"/"), chromedp.WaitVisible(chromedp.CSS(".card")))

	// The label filter.
	step("filter", chromedp.SendKeys(chromedp.CSS("#filter"), "env=prod"))
	if got := eval(`Array.from(document.querySelectorAll('.card')).filter(c => !c.hidden).map(c => c.dataset.name).join(',')`); got != "open" {
		t.Errorf("filtered by env=prod, the page shows %q", got)
	}
	browser.Screenshot(t, ctx, "filtered")

	// On a phone's screen the page fits its width.
	step("a phone's viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(3)))
	if got := eval(`String(document.documentElement.scrollWidth <= window.innerWidth)`); got != "true" {
		t.Errorf("on a 390 px wide screen the page scrolls sideways")
	}
	browser.Screenshot(t, ctx, "phone")
	step("a laptop's viewport", chromedp.EmulateViewport(1280, 800))

	// The kubeconfig the page links to works for the person who got it.
	kubeconfig := eval(`fetch(document.getElementById('kubeconfig').href).then(r => r.text())`, chromedp.EvalAwaitPromise)
	if !strings.Contains(kubeconfig, "server: "+h.url+"/clusters/open") || strings.Contains(kubeconfig, "clusters/ops") {
		t.Fatalf("kubeconfig:\n%s", kubeconfig)
	}
	token := kubeconfig[strings.Index(kubeconfig, "token: ")+len("token: "):]
	token = strings.TrimSpace(token[:strings.IndexByte(token, '\n')])
	if code, body, _ := call(t, "GET", h.url+"/clusters/open/api", token, nil); code != http.StatusOK {
		t.Errorf("the downloaded kubeconfig's token: %d %s", code, body)
	}
}
