package server

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tetherhq/tether/internal/login"
	"github.com/tetherhq/tether/internal/protocol"
	"github.com/tetherhq/tether/internal/testutil/browser"
	"github.com/tetherhq/tether/internal/testutil/fakecluster"
)

// TestPageTimelineConnectSearch drives, in a real Chromium at a laptop's
// and a phone's width, the status timelines (small on the cards, full on
// the cluster page), the cluster page's Connect panel, and the fleet
// search streamed in, whose rows open the object on its cluster's page;
// checked by what the page shows, with no sideways scrolling.
func TestPageTimelineConnectSearch(t *testing.T) {
	fc := fakecluster.New(t)
	answerAccessReviews(t, fc, func(user, resource, namespace string) bool { return user == "bob" })
	h, _ := proxyHub(t, fc, "", selfPublic)
	eventually(t, 5*time.Second, "open is Ready", func() bool { return statusOf(h, "open") == "Ready" })
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { h.web.RecordTimelines(ctx) })
	t.Cleanup(func() { stop(); wg.Wait() })
	webDep := res("deployments", "shop", "web", true)
	webDep.Replicas = "3/3"
	api := res("deployments", "shop", "api", false)
	api.Replicas = "1/2"
	feed(t, h, h.inventory.Receiver("open"), "open", &protocol.Update{Snapshot: true, Complete: true,
		Kinds: []protocol.KindState{{Kind: "nodes"}, {Kind: "pods"}, {Kind: "deployments"}}, Upserts: []protocol.Resource{webDep, api}})

	d := driver{t, browser.New(t)}
	d.do("sign in as bob", chromedp.Navigate(h.url+"/"), chromedp.SendKeys(chromedp.CSS("#token"), bobToken+"\r"), chromedp.WaitVisible(chromedp.CSS(".card")))
	noSideways := func(page string) {
		t.Helper()
		if got := d.eval(`String(document.documentElement.scrollWidth <= window.innerWidth)`); got != "true" {
			t.Errorf("the %s scrolls sideways at %s px", page, d.eval(`String(window.innerWidth)`))
		}
	}
	for _, vp := range []struct {
		name string
		w, h int64
	}{{"laptop", 1280, 800}, {"phone", 390, 844}} {
		d.do("a "+vp.name+"'s viewport", chromedp.EmulateViewport(vp.w, vp.h), chromedp.Navigate(h.url+"/"), chromedp.WaitVisible(chromedp.CSS(".card")))
		// The cards' timelines: open Ready, far Unreachable, each span
		// saying what and when on hover.
		d.poll("open's card has a Ready span", `!!document.querySelector('.card[data-name="open"] .timeline svg rect.ready')`, 5*time.Second)
		if got := d.eval(`document.querySelector('.card[data-name="open"] .timeline rect.ready title').textContent`); !strings.Contains(got, "Ready, ") || !strings.Contains(got, " to now") {
			t.Errorf("open's Ready span says %q", got)
		}
		if got := d.eval(`document.querySelector('.card[data-name="far"] .timeline rect.unreachable title').textContent`); !strings.Contains(got, "Unreachable: Its agent isn't connected.") {
			t.Errorf("far's span says %q", got)
		}
		if got := d.eval(`String(document.querySelector('.card[data-name="open"] .timeline svg').getBoundingClientRect().width > 100)`); got != "true" {
			t.Errorf("open's timeline is not drawn across its card")
		}
		// The search, streamed in: the deployments not ready.
		d.do("search", chromedp.SetValue(chromedp.CSS(`#search select[name=kind]`), "deployments"),
			chromedp.SetValue(chromedp.CSS(`#search select[name=ready]`), "false"), chromedp.Click(chromedp.CSS(`#search button`)))
		d.poll("the search is done", `/found\.$|Nothing found/.test(document.getElementById('search-status').textContent)`, 10*time.Second)
		if got := d.eval(`Array.from(document.querySelectorAll('#search-results tbody tr')).map(tr => tr.textContent).join('|')`); got != "openshopapi✖ not ready" {
			t.Errorf("the search's rows: %q", got)
		}
		if got := d.eval(`document.getElementById('search-status').textContent`); got != "1 found." {
			t.Errorf("the search's status: %q", got)
		}
		noSideways("fleet page")
		browser.Screenshot(t, d.ctx, "fleet-search-"+vp.name)

		// The row opens the object on its cluster's page, its details open.
		d.do("open the row's link", chromedp.Click(chromedp.CSS(`#search-results tbody a`)), chromedp.WaitVisible(chromedp.CSS("#connect")))
		d.poll("api's details are open", `!!document.querySelector('tr.object[aria-expanded="true"][data-name="api"]') && !!document.querySelector('tr.details')`, 10*time.Second)
		if got := d.eval(`document.getElementById('connect-login').textContent`); got != "tether login --hub "+h.url {
			t.Errorf("the login command: %q, want tether login --hub %s", got, h.url)
		}
		if got, want := d.eval(`document.getElementById('connect-kubectl').textContent`), fmt.Sprintf("kubectl --context %s get ns", (login.Names{Prefix: login.Prefix(h.url)}).Context("open")); got != want {
			t.Errorf("the kubectl command: %q, want %q", got, want)
		}
		if got := d.eval(`String(document.querySelectorAll('#connect button.copy').length)`); got != "2" {
			t.Errorf("%s copy buttons, want 2", got)
		}
		if got := d.eval(`document.querySelector('#timeline rect.ready title').textContent`); !strings.Contains(got, "Ready, ") {
			t.Errorf("the cluster page's timeline: %q", got)
		}
		if got := d.eval(`String(document.querySelector('#timeline svg').getBoundingClientRect().height >= 20)`); got != "true" {
			t.Errorf("the cluster page's timeline is not drawn full size")
		}
		noSideways("cluster page")
		browser.Screenshot(t, d.ctx, "cluster-connect-"+vp.name)
	}
}
