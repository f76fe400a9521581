package listfile

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/fsnotify/fsnotify"
)

// WatchOptions tune WatchFile. The zero value is ready to use.
type WatchOptions struct {
	// Debounce is how long to wait after the last event before reading; zero means 100 ms.
	Debounce time.Duration
	// PollInterval is how often to read the file without events; zero means a minute, negative
	// never.
	PollInterval time.Duration
	// Initial is the content the caller already has, so an unchanged file is not reported.
	Initial []byte
	// Unwatched, when set, is told why the directory can't be watched (no inotify watches
	// left, say); WatchFile then goes on reading the file every PollInterval alone.
	Unwatched func(error)

	// checked, when set, is called after each read of the file, changed or not: a test of
	// what must not be reported waits for it rather than for a while.
	checked func()
}

// WatchFile calls changed with the content of the file at path whenever it differs from the last
// content seen, and with the error when the file can't be read (once per distinct error), until
// ctx is done. It checks once at start, so a change between the caller's first read and the
// watch is not missed. changed runs on WatchFile's goroutine.
//
// It watches the file's directory, not the file: Kubernetes updates a mounted Secret by pointing
// the ..data symlink at a new directory, which changes what path resolves to without an event
// on the file itself, and a file that is removed and created again loses a watch on it.
func WatchFile(ctx context.Context, path string, opts WatchOptions, changed func(data []byte, err error)) error {
	if opts.Debounce <= 0 {
		opts.Debounce = 100 * time.Millisecond
	}
	if opts.PollInterval == 0 {
		opts.PollInterval = time.Minute
	}
	dir := filepath.Dir(path)
	w, err := fsnotify.NewWatcher()
	if err == nil {
		if err = w.Add(dir); err != nil {
			w.Close()
		}
	}
	// Nil channels never deliver: without a watch, polling alone finds changes.
	var events <-chan fsnotify.Event
	var watchErrs <-chan error
	if err != nil {
		err = fmt.Errorf("watch %s: %w", dir, err)
		if opts.PollInterval < 0 {
			return err
		}
		if opts.Unwatched != nil {
			opts.Unwatched(err)
		}
		w = nil
	} else {
		defer w.Close() // waits for fsnotify's own goroutine
		events, watchErrs = w.Events, w.Errors
	}

	last := sha256.Sum256(opts.Initial)
	lastErr := ""
	check := func() {
		if opts.checked != nil {
			defer opts.checked()
		}
		data, err := os.ReadFile(path)
		if err != nil {
			if err.Error() != lastErr {
				lastErr = err.Error()
				changed(nil, err)
			}
			return
		}
		lastErr = ""
		if sum := sha256.Sum256(data); sum != last {
			last = sum
			changed(data, nil)
		}
	}
	check()

	debounce := time.NewTimer(opts.Debounce)
	debounce.Stop()
	defer debounce.Stop()
	var poll <-chan time.Time
	if opts.PollInterval > 0 {
		t := time.NewTicker(opts.PollInterval)
		defer t.Stop()
		poll = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-events:
			if !ok {
				return nil
			}
			// Any name in the directory may be the one path resolves through (..data, a
			// temporary symlink renamed over it), so every event counts.
			debounce.Reset(opts.Debounce)
		case _, ok := <-watchErrs:
			if !ok {
				return nil
			}
			// Mostly a queue overflow: events were lost, so read the file to be sure.
			debounce.Reset(opts.Debounce)
		case <-debounce.C:
			check()
		case <-poll:
			// A directory that was removed and made again lost its watch; take it again.
			if w != nil && !slices.Contains(w.WatchList(), dir) {
				_ = w.Add(dir)
			}
			check()
		}
	}
}
