package server

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/listfile"
	"github.com/tetherhq/tether/internal/testutil/browser"
)

// TestFleetPageFollowsTheAgentsList changes the agents list file under a
// fleet page open in a real Chromium: a card appears for a new cluster,
// follows its labels (and the label filter with them), and goes away when
// the cluster leaves the list or its groups leave the person out, all
// without the page being loaded again. A card whose cluster went while the
// page had no stream goes when the stream is back.
func TestFleetPageFollowsTheAgentsList(t *testing.T) {
	// The browser opens the hub at its test address.
	h, write := listFileHub(t, listEntry("a", ", labels: {env: dev}")+listEntry("b", ", labels: {env: prod}"), selfPublic)
	d := driver{t, browser.New(t)}
	cards := func() string {
		t.Helper()
		return d.eval(`Array.from(document.querySelectorAll('.card')).map(c => c.dataset.name).join(',')`)
	}
	// waitPage waits until the cards, those the filter shows, and the
	// count are as given.
	waitPage := func(what, all, shown, count string) {
		t.Helper()
		d.poll(what, fmt.Sprintf(`Array.from(document.querySelectorAll('.card')).map(c => c.dataset.name).join(',') === %q &&
			Array.from(document.querySelectorAll('.card')).filter(c => !c.hidden).map(c => c.dataset.name).join(',') === %q &&
			document.getElementById('count').textContent === %q`, all, shown, count), 5*time.Second)
	}

	d.do("sign in as alice", chromedp.Navigate(h.url+"/"), chromedp.SendKeys(chromedp.CSS("#token"), aliceToken+"\r"), chromedp.WaitVisible(chromedp.CSS(".card")))
	if got := cards(); got != "a,b" {
		t.Fatalf("alice sees cards %q, want a,b", got)
	}
	// A page loaded again would lose this.
	d.eval(`window.sameLoad = "yes"; "ok"`)
	d.do("filter", chromedp.SendKeys(chromedp.CSS("#filter"), "env=prod"))
	waitPage("the filter shows b", "a,b", "b", "1 of 2 clusters")

	write(listEntry("a", ", labels: {env: dev}") + listEntry("b", ", labels: {env: prod}") + listEntry("e", ", labels: {env: dev}"))
	waitPage("e's card comes, hidden by the filter", "a,b,e", "b", "1 of 3 clusters")
	browser.Screenshot(t, d.ctx, "added")

	write(listEntry("a", ", labels: {env: dev}") + listEntry("b", ", labels: {env: prod}") + listEntry("e", ", labels: {env: prod, team: web}"))
	waitPage("e's new labels match the filter", "a,b,e", "b,e", "2 of 3 clusters")
	if got := d.eval(`document.querySelector('.card[data-name="e"] .labels').textContent`); got != "env=prod team=web" {
		t.Errorf("e's card shows the labels %q", got)
	}
	browser.Screenshot(t, d.ctx, "labels")

	write(listEntry("a", ", labels: {env: dev}") + listEntry("b", ", labels: {env: prod}, groups: [ops]") + listEntry("e", ", labels: {env: prod, team: web}"))
	waitPage("b is ops' alone: alice's card of it goes", "a,e", "e", "1 of 2 clusters")

	write(listEntry("a", ", labels: {env: dev}") + listEntry("b", ", labels: {env: prod}, groups: [ops]"))
	waitPage("e left the list: its card goes", "a", "", "0 of 1 cluster")
	browser.Screenshot(t, d.ctx, "removed")
	// A word without "=" is part of a name.
	filterBy := func(text string) {
		t.Helper()
		d.eval(fmt.Sprintf(`{ const f = document.getElementById('filter'); f.value = %q; f.dispatchEvent(new Event('input')); } "ok"`, text))
	}
	filterBy("b")
	waitPage("a name's part finds no a", "a", "", "0 of 1 cluster")
	filterBy("a env=dev")
	waitPage("a name's part and a label find a", "a", "a", "1 of 1 cluster")
	filterBy("")
	waitPage("without a filter, a", "a", "a", "1 cluster")
	// A label's value may hold spaces: quoted, the filter finds it.
	write(listEntry("a", `, labels: {env: dev, team: "platform eng"}`) + listEntry("b", ", labels: {env: prod}, groups: [ops]"))
	d.poll("a's new label", `document.querySelector('.card[data-name="a"] .labels').textContent === "env=dev team=platform eng"`, 5*time.Second)
	filterBy(`team="platform eng" env=dev`)
	waitPage("a quoted value with a space finds a", "a", "a", "1 of 1 cluster")
	filterBy(`team=platform`)
	waitPage("part of the value finds nothing", "a", "", "0 of 1 cluster")
	filterBy("")

	// The page's stream breaks, and a leaves the list while it is down (a
	// change no stream is told of, as when a hub restarts with a new list):
	// the stream that comes back takes the card away.
	h.cfg.Agents.Replace([]fleet.Agent{{Name: "b", TokenHashes: []listfile.Hash{listfile.HashToken(testToken)}, Groups: fleet.Groups{Names: []string{"ops"}}}})
	h.srv.CloseClientConnections()
	d.poll("a's card goes once the stream is back", `document.querySelectorAll('.card').length === 0 && document.getElementById('count').textContent === "0 clusters"`, 10*time.Second)

	if got := d.eval(`String(window.sameLoad)`); got != "yes" {
		t.Errorf("the page was loaded again (window.sameLoad is %q)", got)
	}

	// A cluster page follows its cluster's labels, and says so when the
	// cluster leaves the list, no longer showing it as it was.
	write(listEntry("f", ", labels: {env: dev}"))
	d.poll("f's card comes", `document.querySelector('.card[data-name="f"]') !== null`, 5*time.Second)
	d.do("open f's page", chromedp.Click(chromedp.CSS(`.card[data-name="f"] a.name`)), chromedp.WaitVisible(chromedp.CSS("#history")))
	write(listEntry("f", ", labels: {env: prod, team: web}"))
	d.poll("f's page shows its new labels", `document.getElementById('labels').textContent === "env=prod team=web"`, 5*time.Second)
	write(listEntry("g", ""))
	d.poll("f's page says f is gone", `!document.getElementById('error').hidden && document.getElementById('error').textContent === 'Tether has no cluster "f".'`, 5*time.Second)
	if got := d.eval(`document.querySelector('#status .text').textContent`); got != "Not in the fleet" {
		t.Errorf("f gone, its page's status line reads %q", got)
	}
	browser.Screenshot(t, d.ctx, "cluster-gone")

	// Signed out (here from the page itself; a hub restarted with new keys
	// does the same), the stream that comes back is refused, and the
	// browser gives up on it: the page says so, rather than go on showing
	// old state as if it were live.
	if got := d.eval(`document.getElementById('live').hidden ? "hidden" : "shown"`); got != "hidden" {
		t.Errorf("the live-updates notice is %s while the stream runs", got)
	}
	d.eval(`fetch("/logout", {method: "POST"}).then(r => String(r.status))`, chromedp.EvalAwaitPromise)
	h.srv.CloseClientConnections()
	d.poll("the page says it is signed out", `!document.getElementById('live').hidden &&
		document.getElementById('live').textContent.startsWith("You are signed out") &&
		document.querySelector('#live a').textContent === "Sign in again"`, 10*time.Second)
	browser.Screenshot(t, d.ctx, "signed-out")

	// The hub goes away under a page: the browser tries the stream again
	// and again, and the page says it can't reach the hub.
	d.do("sign in again", chromedp.Navigate(h.url+"/"), chromedp.SendKeys(chromedp.CSS("#token"), aliceToken+"\r"), chromedp.WaitVisible(chromedp.CSS("#filter")))
	d.poll("the stream runs", `document.getElementById('live').hidden && document.querySelectorAll('.card').length === 1`, 5*time.Second)
	h.srv.Listener.Close()
	h.srv.CloseClientConnections()
	d.poll("the page says the hub can't be reached", `!document.getElementById('live').hidden &&
		document.getElementById('live').textContent.startsWith("Tether's hub can't be reached")`, 10*time.Second)
	browser.Screenshot(t, d.ctx, "hub-away")
}
