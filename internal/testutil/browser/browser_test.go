package browser

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const page = `<!doctype html>
<html><head><title>fleet</title></head>
<body>
<h1>Fleet</h1>
<button id="ping" onclick="document.getElementById('status').textContent = 'pong'">ping</button>
<p id="status">idle</p>
<input id="filter" type="text">
</body></html>`

func TestNewDrivesPageAndCleansUp(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write([]byte(page))
	}))
	defer srv.Close()

	var pid int
	var dataDir string
	t.Run("drive", func(t *testing.T) {
		start := time.Now()
		ctx := New(t)
		t.Logf("browser started in %v", time.Since(start))

		proc := chromedp.FromContext(ctx).Browser.Process()
		pid = proc.Pid
		dataDir = userDataDir(t, pid)

		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := chromedp.Do(ctx,
			chromedp.Navigate(srv.URL),
			chromedp.Click(chromedp.CSS("#ping")),
		); err != nil {
			t.Fatal(err)
		}
		// The click handler runs in the page; wait for its effect rather than assume it.
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById('status').textContent === 'pong'`)); err != nil {
			t.Fatalf("waiting for the click to take effect: %v", err)
		}
		if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS("#filter"), "prod-eu")); err != nil {
			t.Fatal(err)
		}
		status, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#status")))
		if err != nil {
			t.Fatal(err)
		}
		if status != "pong" {
			t.Errorf("status after click = %q, want %q", status, "pong")
		}
		value, err := chromedp.Run(ctx, chromedp.Value(chromedp.CSS("#filter")))
		if err != nil {
			t.Fatal(err)
		}
		if value != "prod-eu" {
			t.Errorf("input value = %q, want %q", value, "prod-eu")
		}

		path := Screenshot(t, ctx, "after click")
		if want := "TestNewDrivesPageAndCleansUp_drive-after_click.png"; filepath.Base(path) != want {
			t.Errorf("screenshot name = %q, want %q", filepath.Base(path), want)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
			t.Errorf("%s is not a PNG (%d bytes)", path, len(b))
		}
	})
	if t.Failed() || t.Skipped() || pid == 0 {
		return
	}

	if left := processesUsing(t, dataDir); len(left) > 0 {
		t.Errorf("after the test, processes still use %s: %v", dataDir, left)
	}
	if _, err := os.Stat(dataDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after the test, user data dir %s: stat err = %v, want not exist", dataDir, err)
	}
}

// userDataDir reads the --user-data-dir flag from the command line of process pid.
func userDataDir(t *testing.T, pid int) string {
	t.Helper()
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	for arg := range bytes.SplitSeq(cmdline, []byte{0}) {
		if dir, ok := strings.CutPrefix(string(arg), "--user-data-dir="); ok {
			return dir
		}
	}
	t.Fatalf("browser pid %d has no --user-data-dir: %q", pid, cmdline)
	return ""
}

// processesUsing returns the pids whose command line names dir as the user data directory.
func processesUsing(t *testing.T, dir string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue // gone meanwhile
		}
		if bytes.Contains(cmdline, []byte(dir)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func TestFind(t *testing.T) {
	t.Run("env names a missing file", func(t *testing.T) {
		t.Setenv(envPath, "/nonexistent/chromium")
		_, err := Find()
		if !errors.Is(err, ErrNotFound) {
			t.Fatalf("Find() err = %v, want ErrNotFound", err)
		}
		for _, want := range []string{"/nonexistent/chromium", "apt-get install chromium"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("Find() err = %q, want it to mention %q", err, want)
			}
		}
	})
	t.Run("env names a non-executable file", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "chromium")
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Setenv(envPath, p)
		if _, err := Find(); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Find() err = %v, want ErrNotFound", err)
		}
	})
	t.Run("env wins", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "my-chromium")
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		t.Setenv(envPath, p)
		got, err := Find()
		if err != nil || got != p {
			t.Fatalf("Find() = %q, %v; want %q, nil", got, err, p)
		}
	})
	t.Run("nothing installed", func(t *testing.T) {
		if executable("/usr/bin/chromium") == nil {
			t.Skip("/usr/bin/chromium is installed")
		}
		t.Setenv(envPath, "")
		t.Setenv("PATH", t.TempDir())
		_, err := Find()
		if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "apt-get install chromium") {
			t.Fatalf("Find() err = %v, want ErrNotFound with the install hint", err)
		}
	})
}

func TestFileName(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"TestFleet", "TestFleet"},
		{"TestFleet/one_cluster", "TestFleet_one_cluster"},
		{"after click", "after_click"},
		{"../../etc/passwd", "etc_passwd"},
		{"a//b", "a_b"},
	} {
		if got := fileName(tc.in); got != tc.want {
			t.Errorf("fileName(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestRepoRoot(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if !declaresModule(filepath.Join(root, "go.mod"), modulePath) {
		t.Errorf("repoRoot() = %q, whose go.mod is not module %s", root, modulePath)
	}
	t.Chdir(t.TempDir())
	if _, err := repoRoot(); err == nil {
		t.Error("repoRoot() outside the repository: err = nil, want an error")
	}
}

// recordingTB is a testing.TB whose Fatalf and Skipf record the message and end the goroutine,
// as the real ones do, so New's handling of a missing Chromium can be checked.
type recordingTB struct {
	testing.TB
	fataled, skipped bool
	msg              string
}

func (r *recordingTB) Fatalf(format string, args ...any) {
	r.fataled, r.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *recordingTB) Skipf(format string, args ...any) {
	r.skipped, r.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestNewWithoutChromium(t *testing.T) {
	for _, tc := range []struct {
		ci                  string
		wantFatal, wantSkip bool
	}{
		{ci: "", wantSkip: true},
		{ci: "false", wantSkip: true},
		{ci: "true", wantFatal: true},
		{ci: "1", wantFatal: true},
	} {
		t.Run("CI="+tc.ci, func(t *testing.T) {
			t.Setenv(envPath, "/nonexistent/chromium")
			t.Setenv("CI", tc.ci)
			r := &recordingTB{TB: t}
			done := make(chan struct{})
			go func() {
				defer close(done)
				New(r)
				t.Error("New returned a context without a Chromium")
			}()
			<-done
			if r.fataled != tc.wantFatal || r.skipped != tc.wantSkip {
				t.Errorf("fatal, skip = %v, %v; want %v, %v", r.fataled, r.skipped, tc.wantFatal, tc.wantSkip)
			}
			if !strings.Contains(r.msg, "apt-get install chromium") {
				t.Errorf("message %q lacks the install hint", r.msg)
			}
		})
	}
}
