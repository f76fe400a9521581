package server

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tetherhq/tether/internal/protocol"
	"github.com/tetherhq/tether/internal/testutil/browser"
	"github.com/tetherhq/tether/internal/testutil/fakecluster"
)

// TestClusterPageWarningsAndDomains: in a real Chromium, the cluster page
// shows an object's warning events below its status (the last of each reason,
// newest first, only those the person may list), the cluster's domains,
// quotas, virtual services and failed workflows with their message, and
// follows a new warning without a reload.
func TestClusterPageWarningsAndDomains(t *testing.T) {
	fc := fakecluster.New(t)
	// alice may list everything, but events and gateways in team-a alone.
	answerAccessReviews(t, fc, func(user, resource, namespace string) bool {
		if user != "alice" {
			return false
		}
		if resource == "events" || resource == "gateways" {
			return namespace == "team-a"
		}
		return true
	})
	h, _ := proxyHub(t, fc, "", selfPublic)
	rcv := h.inventory.Receiver("open")
	event := func(ns, name, object, reason, lastSeen string, count int32, message string) protocol.Resource {
		r := res("events", ns, name, true)
		r.Object, r.Reason, r.LastSeen, r.Count, r.Message = object, reason, lastSeen, count, message
		return r
	}
	web := res("deployments", "team-a", "web", false)
	web.Replicas = "1/2"
	quota := res("resourcequotas", "team-a", "compute", true)
	quota.Quota = []string{"limits.cpu 3/4", "pods 9/10"}
	vs := res("virtualservices", "team-a", "shop", true)
	vs.Hosts, vs.Gateways = []string{"shop.example.com"}, []string{"istio-system/public"}
	wf := res("workflows", "team-a", "nightly-x7", false)
	wf.Phase, wf.Message = "Failed", "child 'train' failed"
	gwA, gwB := res("gateways", "team-a", "gw", true), res("gateways", "team-b", "gw", true)
	gwA.Hosts, gwB.Hosts = []string{"shop.example.com"}, []string{"billing.example.com"}
	feed(t, h, rcv, "open", &protocol.Update{Snapshot: true, Complete: true,
		Kinds: []protocol.KindState{{Kind: "nodes"}, {Kind: "pods"}, {Kind: "deployments"}, {Kind: "events"}, {Kind: "resourcequotas"},
			{Kind: "virtualservices"}, {Kind: "workflows"}, {Kind: "gateways"},
			{Kind: "sparkapplications", Missing: true, Error: "the cluster doesn't serve sparkapplications.sparkoperator.k8s.io"}},
		Upserts: []protocol.Resource{
			notReadyPod("team-a", "web-1", "CrashLoopBackOff", 7), notReadyPod("team-b", "db-0", "Pending", 0), web, quota, vs, wf, gwA, gwB,
			event("team-a", "e1", "Pod/web-1", "BackOff", "2026-12-03T10:00:00Z", 3, "Back-off restarting failed container"),
			event("team-a", "e2", "Pod/web-1", "BackOff", "2026-12-03T11:00:00Z", 9, "Back-off restarting failed container web"),
			event("team-a", "e3", "Pod/web-1", "Unhealthy", "2026-12-03T10:30:00Z", 1, "Readiness probe failed"),
			event("team-a", "e4", "Deployment/web", "FailedCreate", "2026-12-03T09:00:00Z", 2, `exceeded quota: compute`),
			event("team-b", "e5", "Pod/db-0", "FailedScheduling", "2026-12-03T12:00:00Z", 4, "0/3 nodes are available"),
		}})

	d := driver{t, browser.New(t)}
	d.do("sign in as alice", chromedp.Navigate(h.url+"/"), chromedp.SendKeys(chromedp.CSS("#token"), aliceToken+"\r"), chromedp.WaitVisible(chromedp.CSS(".card")))
	d.do("open the cluster page", chromedp.Navigate(h.url+"/cluster/open"), chromedp.WaitVisible(chromedp.CSS("#quotas tbody tr")))
	d.poll("the pods are there", `document.querySelector('#pods .count').textContent === "(2)"`, 5*time.Second)
	if got, want := d.column("pods", 3), "✖ CrashLoopBackOff⚠ BackOff ×9, last 2026-12-03 11:00:00 UTC: Back-off restarting failed container web⚠ Unhealthy, last 2026-12-03 10:30:00 UTC: Readiness probe failed|✖ Pending"; got != want {
		t.Errorf("the pods' warnings (db-0's are in team-b, where alice may not list events):\ngot  %s\nwant %s", got, want)
	}
	if got := d.column("workloads", 4); !strings.Contains(got, "FailedCreate ×2") || !strings.Contains(got, "exceeded quota: compute") {
		t.Errorf("the deployment's warnings: %q", got)
	}
	if got := d.column("quotas", 3); got != "limits.cpu 3/4, pods 9/10" {
		t.Errorf("the quota's use: %q", got)
	}
	if got := d.column("virtualservices", 3) + " " + d.column("virtualservices", 4); got != "shop.example.com istio-system/public" {
		t.Errorf("the virtual service: %q", got)
	}
	if got := d.column("runs", 3) + " " + d.column("runs", 4) + " " + d.column("runs", 5); got != "nightly-x7 ✖ Failed child 'train' failed" {
		t.Errorf("the failed workflow: %q", got)
	}
	// billing.example.com's gateway is in team-b: not alice's to see.
	if got := d.column("domains", 1) + " " + d.column("domains", 2); got != "shop.example.com team-a/gw" {
		t.Errorf("the domains: %q", got)
	}
	if got := d.eval(`document.getElementById('missing').textContent`); got != "Not watched: the Spark operator isn't installed." {
		t.Errorf("missing kinds: %q", got)
	}
	browser.Screenshot(t, d.ctx, "warnings")

	// A row opens the object's details: the events the hub keeps for it (the
	// latest of each reason), newest first, each time as the page writes
	// times; Enter closes it.
	row := `#pods tbody tr[data-name="web-1"]`
	d.do("open web-1's details", chromedp.Click(chromedp.CSS(row)))
	d.poll("web-1's events show", `(document.querySelector('#pods tr.details') || {textContent: ""}).textContent.includes("Readiness probe failed")`, 5*time.Second)
	want := "Pod/web-1 in team-a" +
		"2026-12-03 11:00:00 UTC BackOff ×9: Back-off restarting failed container web" +
		"2026-12-03 10:30:00 UTC Unhealthy: Readiness probe failed"
	if got := d.eval(`document.querySelector('#pods tr.details').textContent`); got != want {
		t.Errorf("web-1's details:\ngot  %s\nwant %s", got, want)
	}
	if got := d.eval(`document.querySelector('` + row + `').getAttribute('aria-expanded')`); got != "true" {
		t.Errorf("the opened row's aria-expanded: %q", got)
	}
	browser.Screenshot(t, d.ctx, "details")
	d.do("close web-1's details", chromedp.Focus(chromedp.CSS(row)), chromedp.KeyEvent("\r"))
	d.poll("the details close", `!document.querySelector('#pods tr.details') && document.querySelector('`+row+`').getAttribute('aria-expanded') === "false"`, 5*time.Second)

	// A newer warning comes: the row follows, without a reload.
	d.eval(`window.stillHere = 1; "1"`)
	feed(t, h, rcv, "open", &protocol.Update{Upserts: []protocol.Resource{
		event("team-a", "e6", "Pod/web-1", "OOMKilling", "2026-12-03T13:00:00Z", 1, "Memory cgroup out of memory")}})
	d.poll("the new warning shows first", `document.querySelector('#pods tbody tr[data-name="web-1"] td:nth-child(3) .warning').textContent.includes("OOMKilling")`, 5*time.Second)
	if got := d.eval(`String(window.stillHere)`); got != "1" {
		t.Errorf("the page reloaded to show the change")
	}
}
