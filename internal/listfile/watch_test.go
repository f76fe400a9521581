package listfile

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/testutil/files"
)

// TestWatchFilePolls: a directory removed and made again loses its watch; polling finds the
// file again and takes the watch back.
func TestWatchFilePolls(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secret")
	mustDo(t, os.Mkdir(dir, 0o755))
	path := writeFile(t, dir, "agents.yaml", "one")
	got := make(chan string, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- WatchFile(ctx, path, WatchOptions{Debounce: 5 * time.Millisecond, PollInterval: 20 * time.Millisecond},
			func(data []byte, err error) {
				if err != nil {
					got <- "error"
					return
				}
				got <- string(data)
			})
	}()
	defer func() { cancel(); mustDo(t, <-done) }()
	if s := next(t, got); s != "one" { // the first check, so the watch is in place
		t.Fatalf("got %q, want one", s)
	}

	mustDo(t, os.RemoveAll(dir))
	if s := next(t, got); s != "error" {
		t.Fatalf("got %q, want the read error", s)
	}
	mustDo(t, os.Mkdir(dir, 0o755))
	writeFile(t, dir, "agents.yaml", "two")
	if s := next(t, got); s != "two" {
		t.Fatalf("got %q, want two", s)
	}
	writeFile(t, dir, "agents.yaml", "three")
	if s := next(t, got); s != "three" {
		t.Fatalf("got %q, want three", s)
	}
}

// TestWatchFileWithoutAWatch: a directory that can't be watched (here, one
// that doesn't exist yet; on a node, one past the inotify limit) is said
// once, and the file is still read every poll: changes are found late, not
// never. With polling off, it is an error.
func TestWatchFileWithoutAWatch(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secret")
	path := filepath.Join(dir, "agents.yaml")
	got := make(chan string, 16)
	unwatched := make(chan error, 4)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- WatchFile(ctx, path, WatchOptions{Debounce: 5 * time.Millisecond, PollInterval: 20 * time.Millisecond,
			Unwatched: func(err error) { unwatched <- err }},
			func(data []byte, err error) {
				if err != nil {
					got <- "error"
					return
				}
				got <- string(data)
			})
	}()
	defer func() { cancel(); mustDo(t, <-done) }()
	if err := <-unwatched; err == nil || !strings.Contains(err.Error(), dir) {
		t.Errorf("told %v, want why %s can't be watched", err, dir)
	}
	if s := next(t, got); s != "error" {
		t.Fatalf("got %q, want the read error", s)
	}
	mustDo(t, os.Mkdir(dir, 0o755))
	writeFile(t, dir, "agents.yaml", "one")
	if s := next(t, got); s != "one" {
		t.Fatalf("got %q, want one, read by polling", s)
	}
	if len(unwatched) != 0 {
		t.Errorf("told again: %v", <-unwatched)
	}

	err := WatchFile(context.Background(), path+"-nowhere/x", WatchOptions{PollInterval: -1}, func([]byte, error) {})
	if err == nil {
		t.Error("no watch and no polling: nil error")
	}
}

func TestWatchFileIgnoresUnchanged(t *testing.T) {
	path := writeFile(t, t.TempDir(), "agents.yaml", "one")
	got := make(chan string, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	checked := make(chan struct{}, 16)
	go func() {
		done <- WatchFile(ctx, path, WatchOptions{Debounce: 5 * time.Millisecond, PollInterval: -1, Initial: []byte("one"),
			checked: func() { checked <- struct{}{} }},
			func(data []byte, err error) { got <- string(data) })
	}()
	defer func() { cancel(); mustDo(t, <-done) }()
	waitChecked := func() {
		t.Helper()
		select {
		case <-checked:
		case <-time.After(deadline):
			t.Fatal("the file was never read")
		}
	}
	waitChecked() // the read at start

	// The file is read again after the write, and found unchanged: the
	// reload that must not happen had its chance.
	writeFile(t, filepath.Dir(path), "agents.yaml", "one")
	waitChecked()
	writeFile(t, filepath.Dir(path), "agents.yaml", "two")
	if s := next(t, got); s != "two" {
		t.Fatalf("got %q first, want two: an unchanged file was reported", s)
	}
}

const deadline = 5 * time.Second

func next(t *testing.T, ch <-chan string) string {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(deadline):
		t.Fatal("nothing from WatchFile")
	}
	return ""
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// writeFile replaces dir/name with content atomically (a new file renamed
// into place), so a watcher never reads it half written.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	files.Replace(t, p, content)
	return p
}
