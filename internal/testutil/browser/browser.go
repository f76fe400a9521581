// Package browser starts a real headless Chromium for tests of the hub's web pages, driven by
// chromedp. It exists so the fleet page is tested in the browser people use, with its real
// JavaScript and layout, rather than by matching HTML text; and so every such test starts the
// browser the same way, with flags that keep it off a network the test machines do not have.
package browser

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tetherhq/tether/internal/testutil/syncbuf"
)

// ErrNotFound is what Find wraps when no Chromium is installed.
var ErrNotFound = errors.New("no Chromium found")

const (
	// envPath names a Chromium binary to use instead of searching for one.
	envPath = "TETHER_CHROMIUM"
	// installHint is what a person without a Chromium reads.
	installHint = "install one with `apt-get install chromium`, or set $" + envPath + " to its path"
	// modulePath marks the go.mod of the repository root, under which screenshots go.
	modulePath = "github.com/tetherhq/tether"
	// startTimeout bounds the browser start; a cold start takes well under a second.
	startTimeout = 30 * time.Second
	// closeTimeout bounds the graceful close before the process is killed.
	closeTimeout = 10 * time.Second
)

// Find returns the path of a Chromium to drive: $TETHER_CHROMIUM if set, else /usr/bin/chromium,
// chromium on $PATH, or chromium-browser on $PATH. Its error wraps ErrNotFound and says how to
// install one. A $TETHER_CHROMIUM that is not an executable file is an error, not a reason to
// look elsewhere: whoever set it meant that binary.
func Find() (string, error) {
	if p := os.Getenv(envPath); p != "" {
		if err := executable(p); err != nil {
			return "", fmt.Errorf("$%s=%q: %w: %v; %s", envPath, p, ErrNotFound, err, installHint)
		}
		return p, nil
	}
	if executable("/usr/bin/chromium") == nil {
		return "/usr/bin/chromium", nil
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w (looked for /usr/bin/chromium, chromium and chromium-browser on $PATH); %s", ErrNotFound, installHint)
}

func executable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", path)
	}
	return nil
}

// New starts a headless Chromium for t and returns a chromedp context for its first tab. When t
// ends, the browser is closed: its process and children are gone and its user data directory,
// a fresh temporary one, is removed. If the test failed, the browser's output is logged.
//
// If no Chromium is found, New skips t, or fails it when $CI is true, since a CI machine
// without a browser is a broken CI machine and skipped tests there would pass unseen.
//
// The context has no deadline; bound slow steps with context.WithTimeout on it. Extra
// options go after the defaults, such as chromedp.IgnoreCertErrors for a server whose test CA
// the browser can't be told about.
func New(t testing.TB, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	path, err := Find()
	if err != nil {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatalf("browser: %v", err)
		}
		t.Skipf("browser: %v", err)
	}

	var out syncbuf.Buffer
	// The flags keep Chromium from reaching out to the network: test machines have none, and
	// without them Chromium retries refused connections (updates, sync, QUIC probes) for as
	// long as it runs. The user data directory is a fresh temporary one that chromedp makes,
	// and removes after killing any child still using it.
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-breakpad", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-default-apps", true),
		// /dev/shm is 64 MB in a default container; Chromium crashes when it fills.
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1280, 800),
		chromedp.CombinedOutput(&out),
	}
	allocCtx, allocCancel := chromedp.NewExecAllocator(context.Background(), append(opts, extra...)...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(ctx, closeTimeout)
		err := chromedp.Cancel(cctx)
		ccancel()
		cancel()
		allocCancel() // waits for the process and the removal of its directory
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("browser: close: %v", err)
		}
		if t.Failed() {
			t.Logf("browser output:\n%s", out.String())
		}
	})

	// An empty Do starts the browser and opens the tab, so a browser that will not start fails
	// here, named as such, rather than in the test's first step. The first Do's context owns the
	// browser process, so the start is bounded by a timer that cancels ctx, not by a derived
	// context with a deadline: that would kill the browser as soon as the start returned.
	timer := time.AfterFunc(startTimeout, cancel)
	err = chromedp.Do(ctx)
	if !timer.Stop() {
		t.Fatalf("browser: %s did not start within %v", path, startTimeout)
	}
	if err != nil {
		t.Fatalf("browser: start %s: %v", path, err)
	}
	return ctx
}

// Screenshot saves a full-page PNG of the page in ctx as
// test/out/screenshots/<test name>-<name>.png under the repository root, creating the
// directories, and returns its path. test/out is ignored by git.
func Screenshot(t testing.TB, ctx context.Context, name string) string {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // quality 100 means PNG
	if err != nil {
		t.Fatalf("browser: screenshot %q: %v", name, err)
	}
	root, err := repoRoot()
	if err != nil {
		t.Fatalf("browser: screenshot %q: %v", name, err)
	}
	dir := filepath.Join(root, "test", "out", "screenshots")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("browser: screenshot %q: %v", name, err)
	}
	path := filepath.Join(dir, fileName(t.Name())+"-"+fileName(name)+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatalf("browser: screenshot %q: %v", name, err)
	}
	return path
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// fileName turns a test or shot name, which may hold "/" from subtests, into one path element.
func fileName(s string) string {
	return strings.Trim(unsafeChars.ReplaceAllString(s, "_"), "_.")
}

// repoRoot walks up from the working directory to the directory whose go.mod declares
// module github.com/tetherhq/tether.
func repoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("repo root: %w", err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if declaresModule(filepath.Join(dir, "go.mod"), modulePath) {
			return dir, nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("repo root: no go.mod with module %s in %q or above it", modulePath, wd)
		}
	}
}

func declaresModule(gomod, module string) bool {
	f, err := os.Open(gomod)
	if err != nil {
		return false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) >= 2 && fields[0] == "module" {
			return strings.Trim(fields[1], `"`) == module
		}
	}
	return false
}
