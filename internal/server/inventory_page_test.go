package server

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	authorizationv1 "k8s.io/api/authorization/v1"

	"github.com/tetherhq/tether/internal/inventory/store"
	"github.com/tetherhq/tether/internal/pki"
	"github.com/tetherhq/tether/internal/protocol"
	"github.com/tetherhq/tether/internal/testutil/browser"
	"github.com/tetherhq/tether/internal/testutil/fakecluster"
)

// answerAccessReviews makes fc answer the SelfSubjectAccessReviews the hub
// sends as a person: may decides whether the impersonated user may list
// resource in namespace ("" for every namespace). Everything else goes to
// fc as before. Call it before any agent of fc starts.
func answerAccessReviews(t *testing.T, fc *fakecluster.Cluster, may func(user, resource, namespace string) bool) {
	t.Helper()
	answerReviews(t, fc, func(user string, a *authorizationv1.ResourceAttributes) bool {
		return a.Verb == "list" && may(user, a.Resource, a.Namespace)
	})
}

// answerReviews is answerAccessReviews with the whole question: may is
// given the impersonated user ("" for the agent's service account itself)
// and the review's resource attributes.
func answerReviews(t *testing.T, fc *fakecluster.Cluster, may func(user string, a *authorizationv1.ResourceAttributes) bool) {
	t.Helper()
	cert, err := fc.CA.IssueTLS(pki.Leaf{CommonName: "kube-apiserver", Hosts: []string{"kubernetes.default.svc", "127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews", func(w http.ResponseWriter, r *http.Request) {
		fc.Note(r)
		if fc.ReviewsFail.Load() {
			http.Error(w, `{"kind":"Status","message":"etcdserver: request timed out","code":500}`, http.StatusInternalServerError)
			return
		}
		var review authorizationv1.SelfSubjectAccessReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		a := review.Spec.ResourceAttributes
		review.Status.Allowed = a != nil && may(r.Header.Get("Impersonate-User"), a)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(review)
	})
	mux.Handle("/", fc.Srv.Config.Handler)
	srv := httptest.NewUnstartedServer(mux)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	fc.Srv = srv
}

// feed applies u to cluster's inventory as the hub does with what an agent
// sends, and tells the event streams.
func feed(t *testing.T, h *testHub, rcv *store.Receiver, cluster string, u *protocol.Update) {
	t.Helper()
	if err := u.Validate(); err != nil {
		t.Fatal(err)
	}
	if rcv.Apply(u, time.Now()) {
		h.registry.Changed(cluster)
	}
}

func res(kind, namespace, name string, ready bool) protocol.Resource {
	return protocol.Resource{ResourceRef: protocol.ResourceRef{Kind: kind, Namespace: namespace, Name: name}, Ready: ready}
}

func notReadyPod(namespace, name, phase string, restarts int32) protocol.Resource {
	r := res("pods", namespace, name, false)
	r.Phase, r.Restarts = phase, restarts
	return r
}

// driver drives one browser tab for a test.
type driver struct {
	t   *testing.T
	ctx context.Context
}

func (d driver) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(d.ctx, 15*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		browser.Screenshot(d.t, d.ctx, "failed")
		d.t.Fatalf("%s: %v", what, err)
	}
}

func (d driver) eval(js string, opts ...chromedp.EvaluateOption) string {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(d.ctx, 15*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](js, opts...))
	if err != nil {
		browser.Screenshot(d.t, d.ctx, "failed")
		d.t.Fatalf("%s: %v", js, err)
	}
	return s
}

// poll waits until the JavaScript condition js holds.
func (d driver) poll(what, js string, within time.Duration) {
	d.t.Helper()
	d.do(what, chromedp.Poll[chromedp.Void](js, chromedp.WithPollingTimeout(within)))
}

// column lists the text of column n (from 1) of section id's table rows.
func (d driver) column(id string, n int) string {
	d.t.Helper()
	return d.eval(fmt.Sprintf(`Array.from(document.querySelectorAll('#%s tbody tr td:nth-child(%d)')).map(td => td.textContent).join('|')`, id, n))
}

// TestClusterInventoryPage shows a cluster's inventory on the fleet card and
// the cluster page in a real Chromium: the numbers, the sections, the kinds
// the agent can't watch, bounded tables, live updates without a reload, and
// each person seeing only the pods their RBAC lets them list.
func TestClusterInventoryPage(t *testing.T) {
	fc := fakecluster.New(t)
	// bob may list everything; alice may list everything but pods, and
	// pods only in team-a.
	answerAccessReviews(t, fc, func(user, resource, namespace string) bool {
		switch user {
		case "bob":
			return true
		case "alice":
			return resource != "pods" || namespace == "team-a"
		}
		return false
	})
	h, _ := proxyHub(t, fc, "", selfPublic)
	rcv := h.inventory.Receiver("open")

	// The snapshot an agent would send: three nodes (one not ready), some
	// workloads, 250 pods not ready in team-a and 2 in team-b, a gateway, no
	// Argo CD, and ingresses the agent may not list.
	var objs []protocol.Resource
	for i, ready := range []bool{true, true, false} {
		n := res("nodes", "", fmt.Sprintf("node-%d", i+1), ready)
		n.Version = "v1.36.3"
		if !ready {
			n.Conditions = []protocol.Condition{{Type: "Ready", Status: "False", Reason: "KubeletNotReady"}, {Type: "MemoryPressure", Status: "True", Reason: "KubeletHasInsufficientMemory"}}
		}
		objs = append(objs, n)
	}
	web, api := res("deployments", "team-a", "web", true), res("deployments", "team-a", "api", false)
	web.Replicas, api.Replicas = "3/3", "1/2"
	db := res("statefulsets", "team-b", "db", true)
	db.Replicas = "1/1"
	logs := res("daemonsets", "kube-system", "logs", true)
	logs.Replicas = "3/3"
	job := res("jobs", "team-a", "migrate", true)
	job.Phase = "Complete"
	cron := res("cronjobs", "team-a", "nightly", true)
	gw := res("gateways", "istio-system", "public", true)
	gw.Hosts = []string{"*.example.com", "shop.example.org"}
	objs = append(objs, web, api, db, logs, job, cron, gw, res("pods", "team-a", "ready-one", true))
	for i := range 250 {
		objs = append(objs, notReadyPod("team-a", fmt.Sprintf("pod-%03d", i), "Pending", 0))
	}
	// A name with markup: the page must show it as text.
	objs = append(objs, notReadyPod("team-b", "crash", "CrashLoopBackOff", 7), notReadyPod("team-b", `<img src=x onerror="window.injected=1">`, "Pending", 0))
	kinds := []protocol.KindState{
		{Kind: "nodes"}, {Kind: "namespaces"}, {Kind: "pods"}, {Kind: "services"}, {Kind: "deployments"}, {Kind: "statefulsets"},
		{Kind: "daemonsets"}, {Kind: "jobs"}, {Kind: "cronjobs"}, {Kind: "gateways"},
		{Kind: "ingresses", Error: `ingresses.networking.k8s.io is forbidden: User "system:serviceaccount:tether:tether" cannot list resource "ingresses"`},
		{Kind: "applications", Error: "the cluster doesn't serve applications.argoproj.io", Missing: true},
	}
	feed(t, h, rcv, "open", &protocol.Update{Snapshot: true, Complete: true, Kinds: kinds, Upserts: objs})

	// ops: 10,000 pods not ready in 100 namespaces, and Argo CD with one
	// application out of sync; its agent doesn't watch nodes.
	var many []protocol.Resource
	for i := range 10_000 {
		many = append(many, notReadyPod(fmt.Sprintf("ns-%02d", i%100), fmt.Sprintf("pod-%05d", i), "Pending", 0))
	}
	shop, billing, cart := res("applications", "argocd", "shop", true), res("applications", "argocd", "billing", false), res("applications", "argocd", "cart", false)
	shop.Sync, shop.Health = "Synced", "Healthy"
	billing.Sync, billing.Health = "OutOfSync", "Degraded"
	cart.Sync, cart.Health = "Synced", "Progressing"
	opsRcv := h.inventory.Receiver("ops")
	feed(t, h, opsRcv, "ops", &protocol.Update{Snapshot: true, Kinds: []protocol.KindState{{Kind: "pods"}, {Kind: "applications"}}, Upserts: []protocol.Resource{shop, billing, cart}})
	for i := 0; i < len(many); i += 500 { // in chunks, as an agent sends them
		feed(t, h, opsRcv, "ops", &protocol.Update{Upserts: many[i : i+500], Complete: i+500 == len(many)})
	}

	d := driver{t, browser.New(t)}
	d.do("sign in as bob", chromedp.Navigate(h.url+"/"), chromedp.SendKeys(chromedp.CSS("#token"), bobToken+"\r"), chromedp.WaitVisible(chromedp.CSS(".card")))

	// The card's numbers come from the summary; a cluster without an
	// inventory shows dashes, never "undefined".
	card := func(cluster, what string) string {
		return d.eval(fmt.Sprintf(`document.querySelector('.card[data-name="%s"] dd.%s').textContent.trim()`, cluster, what))
	}
	if got := card("open", "nodes"); got != "⚠ 2 / 3 ready" {
		t.Errorf("open's nodes: %q", got)
	}
	if got := card("open", "pods"); got != "⚠ 252" {
		t.Errorf("open's pods not ready: %q", got)
	}
	if got := card("far", "nodes") + " " + card("far", "pods"); got != "— —" {
		t.Errorf("far has no inventory, and its card says %q", got)
	}
	if got := card("ops", "nodes") + " " + card("ops", "pods") + " " + card("ops", "apps"); got != "— ⚠ 10000 ⚠ 1 out of sync or unhealthy" {
		t.Errorf("ops watches no nodes, has 10,000 pods not ready and one application out of sync; its card says %q", got)
	}
	if got := d.eval(`Array.from(document.querySelectorAll('.card')).filter(c => !c.querySelector('dd.apps').hidden).map(c => c.dataset.name).join(',')`); got != "ops" {
		t.Errorf("the cards that show Argo CD applications: %q, want ops alone", got)
	}
	// ops has no labels: its card has no empty line for them; open's has its.
	if got := d.eval(`String(document.querySelector('.card[data-name="ops"] .labels').hidden) + " " + document.querySelector('.card[data-name="open"] .labels').textContent`); got != "true env=prod region=eu" {
		t.Errorf("ops's labels line hidden, and open's labels: %q", got)
	}
	if strings.Contains(d.eval(`document.getElementById('clusters').textContent`), "undefined") {
		t.Errorf("a card says undefined")
	}
	browser.Screenshot(t, d.ctx, "fleet")

	// The third node turns ready: the card follows without a reload.
	node3 := res("nodes", "", "node-3", true)
	node3.Version = "v1.36.3"
	feed(t, h, rcv, "open", &protocol.Update{Upserts: []protocol.Resource{node3}})
	d.poll("the card shows 3 / 3 nodes ready", `document.querySelector('.card[data-name="open"] dd.nodes').textContent.trim() === "✔ 3 / 3 ready"`, 5*time.Second)
	// A cluster that watches nodes and has none can run nothing: a warning,
	// not a green 0 / 0.
	feed(t, h, h.inventory.Receiver("far"), "far", &protocol.Update{Snapshot: true, Complete: true, Kinds: []protocol.KindState{{Kind: "nodes"}, {Kind: "pods"}}})
	d.poll("far's card says it has no nodes", `document.querySelector('.card[data-name="far"] dd.nodes').textContent.trim() === "⚠ no nodes (an API server without nodes, like tether dev's)"`, 5*time.Second)
	node3.Ready = false
	node3.Conditions = []protocol.Condition{{Type: "Ready", Status: "False", Reason: "KubeletNotReady"}}
	feed(t, h, rcv, "open", &protocol.Update{Upserts: []protocol.Resource{node3}})

	// The cluster page, reached with the keyboard from the card.
	d.do("open the cluster page", chromedp.Focus(chromedp.CSS(`.card[data-name="open"] a.name`)), chromedp.KeyEvent("\r"), chromedp.WaitVisible(chromedp.CSS("#pods tbody tr")))
	d.poll("the pods are all there", `document.querySelector('#pods .count').textContent === "(252)"`, 5*time.Second)
	if got := d.column("nodes", 2); got != "✔ Ready|✔ Ready|✖ Not ready · KubeletNotReady" {
		t.Errorf("nodes' status: %q", got)
	}
	if got := d.column("nodes", 3); got != "v1.36.3|v1.36.3|v1.36.3" {
		t.Errorf("nodes' versions: %q", got)
	}
	// Workloads: what isn't ready first.
	if got := d.column("workloads", 3) + " / " + d.column("workloads", 4) + " / " + d.column("workloads", 5); got !=
		"api|logs|migrate|nightly|web|db / ✖ Not ready|✔ Ready|✔ Complete|✔ Scheduled|✔ Ready|✔ Ready / 1/2|3/3|—|—|3/3|1/1" {
		t.Errorf("workloads: %q", got)
	}
	// 252 pods not ready, of which the page draws 200.
	if got := d.eval(`String(document.querySelectorAll('#pods tbody tr').length)`); got != "200" {
		t.Errorf("the page draws %s pods, want the first 200", got)
	}
	if got := d.eval(`document.querySelector('#pods .more .text').textContent`); !strings.HasPrefix(got, "and 52 more") {
		t.Errorf("below the pods: %q", got)
	}
	if got := d.column("gateways", 3); got != "*.example.com, shop.example.org" {
		t.Errorf("gateway hosts: %q", got)
	}
	if got := d.eval(`document.getElementById('problems').textContent`); !strings.Contains(got, `Tether can't watch ingresses: ingresses.networking.k8s.io is forbidden`) {
		t.Errorf("problems: %q", got)
	}
	if got := d.eval(`document.getElementById('missing').textContent`); got != "Not watched: Argo CD isn't installed." {
		t.Errorf("missing kinds: %q", got)
	}
	if got := d.eval(`String(document.getElementById('applications').hidden)`); got != "true" {
		t.Errorf("Argo CD isn't installed, yet its section shows")
	}
	if got := d.eval(`document.querySelector('#updated time').dateTime`); got == "" {
		t.Errorf("the page doesn't say when the inventory was updated")
	}
	browser.Screenshot(t, d.ctx, "cluster")

	// The namespace filter, with the keyboard: team-b has two pods.
	if got := d.eval(`Array.from(document.getElementById('namespace').options).map(o => o.value).join(',')`); got != ",istio-system,kube-system,team-a,team-b" {
		t.Fatalf("the namespace filter offers %q", got)
	}
	d.do("choose team-b", chromedp.Focus(chromedp.CSS("#namespace")), chromedp.KeyEvent(kb.ArrowDown+kb.ArrowDown+kb.ArrowDown+kb.ArrowDown))
	d.poll("team-b is chosen", `document.getElementById('namespace').value === "team-b"`, 2*time.Second)
	if got := d.column("pods", 2); got != `<img src=x onerror="window.injected=1">|crash` {
		t.Errorf("team-b's pods: %q", got)
	}
	if got := d.column("pods", 3) + " " + d.column("pods", 4); got != "✖ Pending|✖ CrashLoopBackOff 0|7" {
		t.Errorf("team-b's pods' status and restarts: %q", got)
	}
	if got := d.eval(`String(document.querySelectorAll('#pods img').length + (window.injected === undefined ? 0 : 100))`); got != "0" {
		t.Errorf("a pod's name became markup in the page")
	}
	browser.Screenshot(t, d.ctx, "team-b")
	d.do("back to every namespace", chromedp.Focus(chromedp.CSS("#namespace")), chromedp.KeyEvent(kb.Home))
	d.poll("every namespace is chosen", `document.getElementById('namespace').value === ""`, 2*time.Second)
	d.do("show more, with the keyboard", chromedp.Focus(chromedp.CSS("#pods .more button")), chromedp.KeyEvent("\r"))
	if got := d.eval(`String(document.querySelectorAll('#pods tbody tr').length) + String(document.querySelector('#pods .more').hidden)`); got != "252true" {
		t.Errorf("after Show more: %s rows", got)
	}
	if got := d.eval(`document.activeElement.id || document.activeElement.tagName`); got != "pods-heading" {
		t.Errorf("after the last Show more, the keyboard's focus is on %s, want the pods' heading", got)
	}

	// A pod turns not ready, another gets ready: the page follows within
	// seconds, without a reload.
	loads := `String(performance.getEntriesByType('resource').filter(e => e.name.includes('kind=pods')).length)`
	before := d.eval(loads)
	d.eval(`window.stillHere = 1; "1"`)
	start := time.Now()
	late := notReadyPod("team-a", "late", "ImagePullBackOff", 2)
	ok := res("pods", "team-a", "pod-000", true)
	feed(t, h, rcv, "open", &protocol.Update{Upserts: []protocol.Resource{late, ok}})
	d.poll("late shows", `Array.from(document.querySelectorAll('#pods tbody tr')).some(tr => tr.dataset.name === "late" && tr.textContent.includes("ImagePullBackOff"))`, 5*time.Second)
	t.Logf("a pod turned not ready and showed on the page after %s", time.Since(start).Round(time.Millisecond))
	if got := d.eval(`String(Array.from(document.querySelectorAll('#pods tbody tr')).some(tr => tr.dataset.name === "pod-000"))`); got != "false" {
		t.Errorf("pod-000 is ready, yet still listed")
	}
	if got := d.eval(`String(window.stillHere)`); got != "1" {
		t.Errorf("the page reloaded to show the change")
	}
	var b0, a0 int
	fmt.Sscan(before, &b0)
	fmt.Sscan(d.eval(loads), &a0)
	if a0 <= b0 {
		t.Errorf("the page showed the change without loading the pods again (%d loads before, %d after)", b0, a0)
	}
	browser.Screenshot(t, d.ctx, "live")

	// A burst of 20 changes over 2 s makes a few loads, not one each: loads
	// are at least a second apart.
	before = d.eval(loads)
	burstStart := time.Now()
	for i := range 20 {
		p := notReadyPod("team-a", "burst", "Pending", int32(i))
		feed(t, h, rcv, "open", &protocol.Update{Upserts: []protocol.Resource{p}})
		time.Sleep(100 * time.Millisecond)
	}
	// On a loaded machine the burst takes longer, and may make a load more
	// per extra second.
	burst := time.Since(burstStart)
	d.poll("the burst's last change shows", `Array.from(document.querySelectorAll('#pods tbody tr')).some(tr => tr.dataset.name === "burst" && tr.textContent.endsWith("19"))`, 5*time.Second)
	time.Sleep(1500 * time.Millisecond) // any load still due
	var b, a int
	fmt.Sscan(before, &b)
	fmt.Sscan(d.eval(loads), &a)
	most := int(math.Ceil(burst.Seconds())) + 3 // 5 for 2 s
	t.Logf("20 changes in %s made %d loads of the pods", burst.Round(time.Millisecond), a-b)
	if a-b < 1 || a-b > most {
		t.Errorf("20 changes in %s made %d loads of the pods; want 1 to %d", burst.Round(time.Millisecond), a-b, most)
	}

	// On a phone's screen the page fits its width.
	d.do("a phone's viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(3)))
	if got := d.eval(`String(document.documentElement.scrollWidth <= window.innerWidth)`); got != "true" {
		t.Errorf("on a 390 px wide screen the cluster page scrolls sideways")
	}
	d.do("choose team-b", chromedp.Focus(chromedp.CSS("#namespace")), chromedp.KeyEvent(kb.End))
	d.poll("team-b is chosen", `document.getElementById('namespace').value === "team-b"`, 2*time.Second)
	if got := d.eval(`document.querySelector('#gateways .none-here').hidden + " " + document.querySelector('#gateways .empty').hidden`); got != "false true" {
		t.Errorf("team-b has no gateway, and the page says so (none-here hidden, empty hidden): %s", got)
	}
	browser.Screenshot(t, d.ctx, "phone")
	d.do("a laptop's viewport", chromedp.EmulateViewport(1280, 800))

	start = time.Now()
	d.do("open ops' page", chromedp.Navigate(h.url+"/cluster/ops"))
	d.poll("ops' 10,000 pods are counted", `document.querySelector('#pods .count').textContent === "(10000)"`, 30*time.Second)
	t.Logf("ops' page with 10,000 pods not ready showed them %s after navigating; fetching them took %s ms", time.Since(start).Round(time.Millisecond),
		d.eval(`String(Math.round(performance.getEntriesByType('resource').find(e => e.name.includes('kind=pods')).duration))`))
	if got := d.eval(`document.querySelectorAll('#pods tbody tr').length + " " + document.querySelector('#pods .more .text').textContent`); !strings.HasPrefix(got, "200 and 9800 more") {
		t.Errorf("ops' page with 10,000 pods not ready: %q", got)
	}
	if got := d.column("applications", 2) + " " + d.column("applications", 3) + " " + d.column("applications", 4); got != "billing|cart|shop ✖ OutOfSync|✔ Synced|✔ Synced ✖ Degraded|⟳ Progressing|✔ Healthy" {
		t.Errorf("ops' applications: %q", got)
	}
	browser.Screenshot(t, d.ctx, "10000-pods")
	// ops has no labels: its page has no empty Labels row.
	if got := d.eval(`String(document.getElementById('labels-term').hidden && document.getElementById('labels').hidden)`); got != "true" {
		t.Errorf("ops, without labels, has a Labels row")
	}

	// alice may list pods only in team-a: team-b's never reach her page.
	d.do("sign out", chromedp.Navigate(h.url+"/"), chromedp.Click(chromedp.CSS(`form[action$="logout"] button`)), chromedp.WaitVisible(chromedp.CSS("#token")))
	d.do("sign in as alice", chromedp.SendKeys(chromedp.CSS("#token"), aliceToken+"\r"), chromedp.WaitVisible(chromedp.CSS(".card")),
		chromedp.Navigate(h.url+"/cluster/open"), chromedp.WaitVisible(chromedp.CSS("#pods tbody tr")))
	if got := d.eval(`Array.from(new Set(Array.from(document.querySelectorAll('#pods tbody tr')).map(tr => tr.dataset.namespace))).join(',')`); got != "team-a" {
		t.Errorf("alice's page lists pods of namespaces %q, want team-a alone", got)
	}
	if got := d.eval(`document.body.textContent`); strings.Contains(got, "crash") || strings.Contains(got, "CrashLoopBackOff") {
		t.Errorf("alice's page shows team-b's pod crash")
	}
	if got := d.eval(`document.querySelector('#pods .count').textContent`); got != "(251)" {
		t.Errorf("alice's pods not ready: %q, want team-a's 251", got)
	}
	browser.Screenshot(t, d.ctx, "alice")
}

// TestClusterPageSaysWhatIsNotKnown: a cluster page never reads "none" (or
// "✔ every pod is ready") for want of data: without an inventory, or for a
// kind Tether can't watch, it says the list isn't known. Kinds that fail
// for the same reason share one line.
func TestClusterPageSaysWhatIsNotKnown(t *testing.T) {
	fc := fakecluster.New(t)
	answerAccessReviews(t, fc, func(user, resource, namespace string) bool { return true })
	h, _ := proxyHub(t, fc, "", selfPublic)
	d := driver{t, browser.New(t)}
	// Signing in on far's page goes back to it.
	d.do("sign in as bob on far's page", chromedp.Navigate(h.url+"/cluster/far"), chromedp.SendKeys(chromedp.CSS("#token"), bobToken+"\r"),
		chromedp.WaitVisible(chromedp.CSS("#history")))
	if got := d.eval(`location.pathname`); got != "/cluster/far" {
		t.Errorf("signed in on /cluster/far, the browser is at %s", got)
	}
	shown := func(section string) string {
		return d.eval(fmt.Sprintf(`Array.from(document.querySelectorAll('#%s p')).filter(p => !p.hidden).map(p => p.textContent.trim()).join(' | ')`, section))
	}
	d.poll("far's lists aren't known", `!document.querySelector('#pods .unknown').hidden`, 5*time.Second)
	for _, section := range []string{"nodes", "workloads", "pods"} {
		if got := shown(section); got != "Not known yet: the cluster has sent no inventory." {
			t.Errorf("%s without an inventory: %q", section, got)
		}
		if got := d.eval(fmt.Sprintf(`document.querySelector('#%s .count').textContent`, section)); got != "" {
			t.Errorf("%s without an inventory counts %q", section, got)
		}
	}
	browser.Screenshot(t, d.ctx, "no-inventory")

	// The agent can't reach its API server: every kind fails alike, but
	// for one it has a namespace's worth.
	broken := "can't discover the cluster's APIs: connection refused"
	kinds := []protocol.KindState{{Kind: "nodes", Error: broken}, {Kind: "pods", Error: broken}, {Kind: "deployments", Error: broken},
		{Kind: "statefulsets"}, {Kind: "daemonsets"}, {Kind: "jobs"}, {Kind: "cronjobs"}, {Kind: "gateways"}, {Kind: "applications"},
		{Kind: "services", Namespace: "shop", Error: "forbidden"}}
	feed(t, h, h.inventory.Receiver("far"), "far", &protocol.Update{Snapshot: true, Complete: true, Kinds: kinds})
	d.poll("the problems show", `document.querySelectorAll('#problems li').length === 2`, 5*time.Second)
	if got := d.eval(`Array.from(document.querySelectorAll('#problems li')).map(li => li.textContent.trim()).join(' | ')`); got !=
		"⚠ Tether can't watch nodes, pods, deployments: "+broken+" | ⚠ Tether can't watch services in shop: forbidden" {
		t.Errorf("problems: %q", got)
	}
	d.poll("the inventory is loaded", `document.querySelector('#pods .unknown').textContent === "Not known: Tether can't watch pods (above)."`, 5*time.Second)
	if got := d.eval(`document.getElementById('updated').textContent`); !strings.HasSuffix(got, " (what the cluster last sent: it is Unreachable now)") {
		t.Errorf("far is unreachable, and its inventory's line says %q", got)
	}
	for section, want := range map[string]string{
		"nodes":     "Not known: Tether can't watch nodes (above).",
		"pods":      "Not known: Tether can't watch pods (above).",
		"workloads": "Not known: Tether can't watch deployments (above).",
		"gateways":  "No gateways that you may list.",
	} {
		if got := shown(section); got != want {
			t.Errorf("%s: %q, want %q", section, got, want)
		}
	}
	browser.Screenshot(t, d.ctx, "unwatched")

	// The cluster page signs out as the fleet page does.
	d.do("sign out from the cluster page", chromedp.Click(chromedp.CSS(`form[action$="logout"] button`)), chromedp.WaitVisible(chromedp.CSS("#token")))
}

// TestClusterPageRecovers: a cluster page whose load failed (the hub
// couldn't check the person's access) loads again by itself, with no event
// to prompt it; and its status history and labels follow the cluster live.
func TestClusterPageRecovers(t *testing.T) {
	fc := fakecluster.New(t)
	answerAccessReviews(t, fc, func(user, resource, namespace string) bool { return true })
	fc.ReviewsFail.Store(true)
	h, _ := proxyHub(t, fc, "", selfPublic)
	eventually(t, 5*time.Second, "open is Ready", func() bool { return statusOf(h, "open") == "Ready" })
	feed(t, h, h.inventory.Receiver("open"), "open", &protocol.Update{Snapshot: true, Complete: true,
		Kinds: []protocol.KindState{{Kind: "nodes"}, {Kind: "pods"}}, Upserts: []protocol.Resource{notReadyPod("shop", "web-1", "Pending", 0)}})
	d := driver{t, browser.New(t)}
	d.do("sign in as alice on open's page", chromedp.Navigate(h.url+"/cluster/open"), chromedp.SendKeys(chromedp.CSS("#token"), aliceToken+"\r"),
		chromedp.WaitVisible(chromedp.CSS("#history")))
	d.poll("the page says the load failed", `!document.getElementById('error').hidden`, 5*time.Second)
	browser.Screenshot(t, d.ctx, "failed")
	fc.ReviewsFail.Store(false)
	d.poll("the page loads again by itself", `document.getElementById('error').hidden && document.querySelector('#pods .count').textContent === "(1)"`, 15*time.Second)
	if got := d.column("pods", 2); got != "web-1" {
		t.Errorf("pods not ready after the load again: %q", got)
	}

	history := `Array.from(document.querySelectorAll('#history tbody td:nth-child(2)')).map(td => td.textContent).join('|')`
	if got := d.eval(history); got != "Ready" {
		t.Errorf("open's status history: %q, want Ready", got)
	}
	h.agents["open"].Stop(t)
	d.poll("the history gains the disconnect, newest first", history+` === "Unreachable: Its agent isn't connected.|Ready"`, 10*time.Second)
	if got := d.eval(`document.querySelector('#history tbody time').textContent`); !regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$`).MatchString(got) {
		t.Errorf("a history row's time reads %q; want it as the page first wrote it", got)
	}
	if got := d.eval(`document.getElementById('labels').textContent`); got != "env=prod region=eu" {
		t.Errorf("open's labels: %q", got)
	}
	// Every time on the page reads the same way, the inventory's too.
	if got := d.eval(`document.querySelector('#updated time').textContent`); !regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$`).MatchString(got) {
		t.Errorf("the inventory's time reads %q, want it as the history's", got)
	}
	browser.Screenshot(t, d.ctx, "history")
}
