package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tetherhq/tether/internal/localkube"
	"github.com/tetherhq/tether/internal/testutil/browser"
)

// TestInventoryOnTheClusterPage runs the real hub and agent against the real
// API server, and reads the cluster page in a headless Chromium: alice, who
// may list pods only in one namespace, sees that namespace's pods that are
// not ready and never another's; the admin sees both; a new pod shows up
// without a reload.
func TestInventoryOnTheClusterPage(t *testing.T) {
	const mine, theirs = "invpage-mine", "invpage-theirs"
	if err := cluster.GrantInventory(t.Context(), localkube.Namespace, localkube.ServiceAccount); err != nil {
		t.Fatal(err)
	}
	admin(t, "create", "namespace", mine)
	admin(t, "create", "namespace", theirs)
	admin(t, "create", "role", "pod-reader", "-n", mine, "--verb=get,list,watch", "--resource=pods")
	admin(t, "create", "rolebinding", "dev-reads-pods", "-n", mine, "--role=pod-reader", "--group=dev")
	admin(t, "create", "clusterrolebinding", "tether-admins", "--clusterrole=cluster-admin", "--group=tether:admins")
	// The cluster is shared: other tests count what alice may see, so
	// leave her nothing more than she had.
	t.Cleanup(func() {
		admin(t, "delete", "rolebinding", "dev-reads-pods", "-n", mine, "--ignore-not-found")
		admin(t, "delete", "pods", "--all", "-n", mine, "--ignore-not-found")
		admin(t, "delete", "pods", "--all", "-n", theirs, "--ignore-not-found")
	})
	// Pods with no node stay Pending: not ready.
	mustCreatePod(t, mine, "waiting-mine")
	mustCreatePod(t, theirs, "waiting-theirs")

	_, hubURL := hub(t, nil, "e2e")
	a := agent(t, "e2e", hubURL, agentToken)
	a.waitFor(t, 10*time.Second, `Connected to `+hubURL+` as "e2e"`)

	ctx := browser.New(t, chromedp.IgnoreCertErrors)
	do := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, actions...); err != nil {
			browser.Screenshot(t, ctx, "failed")
			t.Fatalf("%s: %v", what, err)
		}
	}
	eval := func(js string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		return s
	}
	podRow := func(ns, name string) string {
		return `Array.from(document.querySelectorAll('#pods tbody tr')).some(tr => tr.dataset.namespace === "` + ns + `" && tr.dataset.name === "` + name + `")`
	}
	chooseNamespace := func(ns string) {
		t.Helper()
		do("choose namespace "+ns, chromedp.Poll[chromedp.Void](`Array.from(document.getElementById('namespace').options).some(o => o.value === "`+ns+`")`),
			chromedp.Evaluate[chromedp.Void](`(s => { s.value = "`+ns+`"; s.dispatchEvent(new Event('change')); })(document.getElementById('namespace'))`))
	}

	// alice: her namespace's pod, not theirs.
	do("alice opens the cluster page",
		chromedp.Navigate(hubURL+"/"),
		chromedp.SendKeys(chromedp.CSS("#token"), aliceToken+"\r"),
		chromedp.WaitVisible(chromedp.CSS(`.card[data-name="e2e"]`)),
		chromedp.Navigate(hubURL+"/cluster/e2e"),
		chromedp.Poll[chromedp.Void](podRow(mine, "waiting-mine"), chromedp.WithPollingTimeout(20*time.Second)),
	)
	chooseNamespace(mine)
	if got := eval(`document.querySelector('#pods tbody tr td:nth-child(3)').textContent`); !strings.HasPrefix(got, "✖ Pending") {
		t.Errorf("waiting-mine's status: %q", got)
	}
	browser.Screenshot(t, ctx, "alice")
	if got := eval(`Array.from(document.getElementById('namespace').options).map(o => o.value).join(',')`); strings.Contains(got, theirs) {
		t.Errorf("alice's namespace filter offers %s, where she may list nothing: %q", theirs, got)
	}
	if got := eval(`String(` + podRow(theirs, "waiting-theirs") + ` || document.body.textContent.includes("waiting-theirs"))`); got != "false" {
		t.Errorf("alice's page shows the pod of %s, where she may not list pods", theirs)
	}

	// A new pod in her namespace shows up without a reload.
	start := time.Now()
	mustCreatePod(t, mine, "late-mine")
	do("late-mine shows", chromedp.Poll[chromedp.Void](podRow(mine, "late-mine"), chromedp.WithPollingTimeout(10*time.Second)))
	t.Logf("a new pod showed on alice's page %s after it was created", time.Since(start).Round(time.Millisecond))
	if got := eval(`String(` + podRow(theirs, "waiting-theirs") + `)`); got != "false" {
		t.Errorf("after a live update, alice's page shows the pod of %s", theirs)
	}
	browser.Screenshot(t, ctx, "alice-live")

	// The admin sees both.
	do("sign out", chromedp.Navigate(hubURL+"/"), chromedp.Click(chromedp.CSS(`form[action$="logout"] button`)), chromedp.WaitVisible(chromedp.CSS("#token")))
	do("the admin opens the cluster page",
		chromedp.SendKeys(chromedp.CSS("#token"), adminToken+"\r"),
		chromedp.WaitVisible(chromedp.CSS(`.card[data-name="e2e"]`)),
		chromedp.Navigate(hubURL+"/cluster/e2e"),
		chromedp.WaitVisible(chromedp.CSS("#pods tbody tr")),
	)
	chooseNamespace(theirs)
	do("the admin sees their pod", chromedp.Poll[chromedp.Void](podRow(theirs, "waiting-theirs"), chromedp.WithPollingTimeout(10*time.Second)))
	chooseNamespace(mine)
	do("the admin sees alice's pods", chromedp.Poll[chromedp.Void](podRow(mine, "waiting-mine")+" && "+podRow(mine, "late-mine"), chromedp.WithPollingTimeout(10*time.Second)))
	// The admin may list nodes: the test node is there, with its version.
	if got := eval(`Array.from(document.querySelectorAll('#nodes tbody tr')).map(tr => tr.textContent).join('|')`); !strings.Contains(got, localkube.NodeName) || !strings.Contains(got, "v1.36") {
		t.Errorf("nodes on the admin's page: %q", got)
	}
	browser.Screenshot(t, ctx, "admin")
}
