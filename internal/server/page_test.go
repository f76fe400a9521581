package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tetherhq/tether/internal/testutil/browser"
	"github.com/tetherhq/tether/internal/testutil/fakecluster"
	"github.com/tetherhq/tether/internal/version"
	"github.com/tetherhq/tether/internal/web"
)

// TestFleetPage drives the fleet page in a real headless Chromium: sign in
// with a static token, see exactly one's clusters and what their cards say,
// watch cards follow their agents without a reload (one going and coming
// back, one connecting for the first time), filter by label, and download a
// kubeconfig.
func TestFleetPage(t *testing.T) {
	fc := fakecluster.New(t)
	// The browser opens the hub at its test address, and the hub refuses
	// sign-ins from any origin but its own public one.
	h, _ := proxyHub(t, fc, "", selfPublic)
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
	// The form says where a token comes from, tied to the field for screen readers.
	if got := eval(`document.getElementById(document.getElementById('token').getAttribute('aria-describedby')).textContent`); !strings.Contains(got, "tether token --person you@example.com") || !strings.Contains(got, "tether dev") {
		t.Errorf("the sign-in form's hint: %q, want where a token comes from", got)
	}
	// With the keyboard alone: the token field has the focus; Enter submits.
	step("sign in", chromedp.KeyEvent(aliceToken+"\r"), chromedp.WaitVisible(chromedp.CSS(".card")))
	if got := eval(`Array.from(document.querySelectorAll('.card')).map(c => c.dataset.name).join(',')`); got != "far,open" {
		t.Fatalf("alice sees cards %q, want far,open", got)
	}
	if got := text(`.card[data-name="open"] .status .text`); got != "Ready" {
		t.Errorf("open's status line: %q", got)
	}
	// The card's Kubernetes version, agent version and connected since:
	// as the hub renders the page, and as the page shows them once its
	// event stream has sent the cluster, each what /api/clusters/open says.
	facts := func(name, doc string) cardFacts {
		t.Helper()
		var f cardFacts
		js := `Promise.resolve(` + doc + `).then(d => { const c = d.querySelector('.card[data-name="` + name + `"]'); const t = c.querySelector('.since time'); return JSON.stringify([c.querySelector('.k8s').textContent, c.querySelector('.agent').textContent, t ? t.dateTime : c.querySelector('.since').textContent]); })`
		if err := json.Unmarshal([]byte(eval(js, chromedp.EvalAwaitPromise)), &f); err != nil {
			t.Fatal(err)
		}
		return f
	}
	const servedPage = `fetch(location.href).then(r => r.text()).then(html => new DOMParser().parseFromString(html, "text/html"))`
	served := facts("open", servedPage)
	shown := facts("open", `document`)
	api := apiFacts(t, h.url, "open")
	since, err := time.Parse(time.RFC3339, api.Since)
	if api.K8s != "v1.36.3-test" || api.Agent != version.Version || err != nil {
		t.Fatalf("/api/clusters/open says %+v, want Kubernetes v1.36.3-test, agent %s and an RFC 3339 time (%v)", api, version.Version, err)
	}
	if served != api {
		t.Errorf("the page as served shows open's %+v, the API %+v", served, api)
	}
	if shown != api {
		t.Errorf("the page shows open's %+v, the API %+v", shown, api)
	}
	// Connected since reads as every time on the pages does, the same in any
	// locale, as served and as shown live, and never wraps mid-date.
	sinceText := func(doc string) string {
		return eval(`Promise.resolve(`+doc+`).then(d => d.querySelector('.card[data-name="open"] .since').textContent)`, chromedp.EvalAwaitPromise)
	}
	if want := since.UTC().Format("2006-01-02 15:04:05 UTC"); sinceText(servedPage) != want || sinceText(`document`) != want {
		t.Errorf("open's connected since reads %q as served and %q live, want %q", sinceText(servedPage), sinceText(`document`), want)
	}
	if got := eval(`getComputedStyle(document.querySelector('.card[data-name="open"] .since time')).whiteSpace`); got != "nowrap" {
		t.Errorf("connected since may wrap: white-space %q", got)
	}
	// No placeholder that reads as a filter already typed.
	if got := eval(`document.getElementById('filter').placeholder`); got != "" {
		t.Errorf("the filter's placeholder %q reads as a value typed", got)
	}
	browser.Screenshot(t, ctx, "fleet")

	// The agent of "open" stops: its card says so within 3 s, no reload.
	h.agents["open"].Stop(t)
	step("open turns Unreachable", chromedp.Poll[chromedp.Void](`document.querySelector('.card[data-name="open"] .status .text').textContent === "Unreachable: Its agent isn't connected."`, chromedp.WithPollingTimeout(3*time.Second)))
	if icon := text(`.card[data-name="open"] .icon`); icon != "✖" {
		t.Errorf("an unreachable card's icon is %q: status must show by more than colour", icon)
	}
	// Not connected, it has no Kubernetes version and no connected since.
	if f := facts("open", `document`); f.K8s != "" || f.Since != "" || f != apiFacts(t, h.url, "open") {
		t.Errorf("unreachable, open's card shows %+v, want no Kubernetes version nor connected since, as the API: %+v", f, apiFacts(t, h.url, "open"))
	}
	browser.Screenshot(t, ctx, "unreachable")
	again := startAgent(t, h.url, "open", fc)
	eventually(t, 5*time.Second, "open's agent is back", again.Connected)
	step("open turns Ready again", chromedp.Poll[chromedp.Void](`document.querySelector('.card[data-name="open"] .status .text').textContent === "Ready"`, chromedp.WithPollingTimeout(5*time.Second)))
	// Connected again: the versions are back, and connected since is the
	// new connection's, no earlier than the first.
	api = apiFacts(t, h.url, "open")
	if f := facts("open", `document`); f != api || f.K8s != "v1.36.3-test" || f.Agent != version.Version {
		t.Errorf("open back, its card shows %+v, the API %+v", f, api)
	}
	if second, err := time.Parse(time.RFC3339, api.Since); err != nil || second.Before(since) {
		t.Errorf("open's agent connected again since %q, first since %s", api.Since, since)
	}
	// far's agent connects for the first time: its card, served with none
	// of the three, gets each of them live.
	for _, doc := range []string{servedPage, `document`} {
		if f := facts("far", doc); f != (cardFacts{}) {
			t.Errorf("far, never connected, shows %+v", f)
		}
	}
	farAgent := startAgent(t, h.url, "far", fc)
	eventually(t, 5*time.Second, "far's agent connects", farAgent.Connected)
	step("far turns Ready", chromedp.Poll[chromedp.Void](`document.querySelector('.card[data-name="far"] .status .text').textContent === "Ready"`, chromedp.WithPollingTimeout(5*time.Second)))
	api = apiFacts(t, h.url, "far")
	if f := facts("far", `document`); f != api || f.K8s != "v1.36.3-test" || f.Agent != version.Version || f.Since == "" {
		t.Errorf("far connected, its card shows %+v, the API %+v", f, api)
	}

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

// cardFacts are a fleet card's Kubernetes version, agent version and
// connected since.
type cardFacts struct{ K8s, Agent, Since string }

func (f *cardFacts) UnmarshalJSON(b []byte) error {
	var a [3]string
	if err := json.Unmarshal(b, &a); err != nil {
		return err
	}
	f.K8s, f.Agent, f.Since = a[0], a[1], a[2]
	return nil
}

// apiFacts are what /api/clusters/<name> says, as alice, of what a card shows.
func apiFacts(t *testing.T, hubURL, name string) cardFacts {
	t.Helper()
	code, body, _ := call(t, "GET", hubURL+"/api/clusters/"+name, aliceToken, nil)
	var c web.ClusterJSON
	if code != http.StatusOK || json.Unmarshal([]byte(body), &c) != nil {
		t.Fatalf("/api/clusters/%s: %d %s", name, code, body)
	}
	f := cardFacts{K8s: c.KubernetesVersion, Agent: c.AgentVersion}
	if c.ConnectedSince != nil {
		f.Since = c.ConnectedSince.Format(time.RFC3339)
	}
	return f
}
