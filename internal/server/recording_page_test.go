package server

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tetherhq/tether/internal/recording"
	"github.com/tetherhq/tether/internal/testutil/browser"
)

// TestRecordingPlaysInThePage: the cluster's page lists alice's recorded
// exec, and its link opens the player, which plays the session in
// Chromium under the page's CSP (WebAssembly allowed there alone).
func TestRecordingPlaysInThePage(t *testing.T) {
	h, audit := recordingsHub(t, recording.Config{Dir: t.TempDir()}, selfPublic)
	line := execThrough(t, h, audit, aliceToken, []byte("ls -l\r"))
	d := driver{t, browser.New(t)}
	d.do("sign in as alice on open's page", chromedp.Navigate(h.url+"/cluster/open"), chromedp.SendKeys(chromedp.CSS("#token"), aliceToken+"\r"),
		chromedp.WaitVisible(chromedp.CSS("#recordings tbody tr")))
	if got := d.column("recordings", 4); got != "sh" {
		t.Errorf("the recording's command: %q, want sh", got)
	}
	browser.Screenshot(t, d.ctx, "recordings")
	d.do("open the recording", chromedp.Click(chromedp.CSS("#recordings tbody a")), chromedp.WaitVisible(chromedp.CSS("#player .ap-player")))
	if got := d.eval(`location.pathname`); got != "/cluster/open/recordings/"+line.RequestID {
		t.Errorf("the link went to %q", got)
	}
	d.do("play it", chromedp.Click(chromedp.CSS("#player .ap-player")))
	d.poll("the terminal shows the session's output", `document.querySelector('#player .ap-term') !== null && document.querySelector('#player .ap-term').textContent.includes('done')`, 15*time.Second)
	browser.Screenshot(t, d.ctx, "player")
}
