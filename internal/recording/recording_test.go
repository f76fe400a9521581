package recording

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func newStore(t *testing.T, cfg Config) *Store {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func meta(id, person string) Meta {
	return Meta{ID: id, Cluster: "c1", Person: person, Verb: "exec", Namespace: "default", Pod: "web", Command: []string{"sh"}, TTY: true}
}

// readCast returns a recording's header and events.
func readCast(t *testing.T, path string) (Header, [][]any) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	var h Header
	var events [][]any
	for i := 0; sc.Scan(); i++ {
		if i == 0 {
			if err := json.Unmarshal(sc.Bytes(), &h); err != nil {
				t.Fatalf("header %q: %v", sc.Text(), err)
			}
			continue
		}
		var e []any
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || len(e) != 3 {
			t.Fatalf("event %q: %v", sc.Text(), err)
		}
		events = append(events, e)
	}
	return h, events
}

func TestRecordsWebSocketSession(t *testing.T) {
	s := newStore(t, Config{})
	r := s.Start(meta("0a1b", "alice"), WebSocket)
	key := []byte{1, 2, 3, 4}
	r.Client(channelMsg(4, `{"Width":132,"Height":43}`, key))
	r.Client(channelMsg(0, "echo hé", key))
	out := channelMsg(1, "hé\r\n", nil)
	r.Server(out[:len(out)-3]) // mid-character, mid-frame
	r.Server(out[len(out)-3:])
	r.Client(channelMsg(4, `{"Width":80,"Height":25}`, key))
	if why := r.Close(); why != "" {
		t.Fatalf("stopped: %s", why)
	}
	if why := r.Close(); why != "" {
		t.Fatalf("second Close: %s", why)
	}
	h, ev := readCast(t, filepath.Join(s.cfg.Dir, "c1", "0a1b.cast"))
	if h.Version != 2 || h.Width != 132 || h.Height != 43 || h.Tether.Person != "alice" || h.Tether.ID != "0a1b" {
		t.Errorf("header %+v", h)
	}
	want := [][2]string{{"i", "echo hé"}, {"o", "hé\r\n"}, {"r", "80x25"}}
	if len(ev) != len(want) {
		t.Fatalf("events %v, want %v", ev, want)
	}
	for i, w := range want {
		if ev[i][1] != w[0] || ev[i][2] != w[1] {
			t.Errorf("event %d: %v, want %v", i, ev[i], w)
		}
	}
}

func TestRecordsSPDYSession(t *testing.T) {
	s := newStore(t, Config{})
	r := s.Start(meta("5d", "bob"), SPDY)
	c, sv := spdySession(t)
	r.Client(c)
	r.Server(sv)
	if why := r.Close(); why != "" {
		t.Fatalf("stopped: %s", why)
	}
	h, ev := readCast(t, filepath.Join(s.cfg.Dir, "c1", "5d.cast"))
	if h.Width != 100 || h.Height != 30 || len(ev) != 2 || ev[0][2] != "id\r" || ev[1][2] != "uid=0(root)\r\n" {
		t.Errorf("header %dx%d, events %v", h.Width, h.Height, ev)
	}
}

// stuckFile is a file whose writes never return until released.
type stuckFile struct {
	entered chan struct{}
	release chan struct{}
}

func (f *stuckFile) Write(b []byte) (int, error) {
	select {
	case f.entered <- struct{}{}:
	default:
	}
	<-f.release
	return len(b), nil
}
func (f *stuckFile) Close() error { return nil }

func TestStuckDiskNeverSlowsTheSession(t *testing.T) {
	f := &stuckFile{entered: make(chan struct{}, 1), release: make(chan struct{})}
	s := newStore(t, Config{QueueBytes: 64 << 10, Create: func(string) (io.WriteCloser, error) { return f, nil }})
	defer close(f.release) // before s.Close (Cleanup), which waits for the writer
	r := s.Start(meta("77", "alice"), WebSocket)
	r.Client(channelMsg(4, `{"Width":80,"Height":24}`, []byte{1, 2, 3, 4})) // the header goes out at once
	frame := channelMsg(1, strings.Repeat("y", 32<<10), nil)
	r.Server(frame)
	<-f.entered // the writer is stuck in its first write
	// A megabyte more, while the disk doesn't move: every call returns.
	for range 32 {
		r.Server(frame)
	}
	if why := r.Close(); why != StoppedBehind {
		t.Fatalf("Close says %q, want %q", why, StoppedBehind)
	}
}

type failingFile struct{}

func (failingFile) Write([]byte) (int, error) { return 0, syscall.ENOSPC }
func (failingFile) Close() error              { return nil }

func TestFullDiskStops(t *testing.T) {
	s := newStore(t, Config{Create: func(string) (io.WriteCloser, error) { return failingFile{}, nil }})
	r := s.Start(meta("78", "alice"), WebSocket)
	r.Server(channelMsg(1, "hello", nil))
	if why := r.Close(); why != StoppedDisk {
		t.Fatalf("Close says %q, want %q", why, StoppedDisk)
	}
	s2 := newStore(t, Config{Create: func(string) (io.WriteCloser, error) { return nil, syscall.ENOSPC }})
	if why := s2.Start(meta("79", "alice"), WebSocket).Close(); why != StoppedDisk {
		t.Fatalf("Close says %q, want %q", why, StoppedDisk)
	}
}

func TestCapStops(t *testing.T) {
	s := newStore(t, Config{MaxBytes: 4 << 10})
	r := s.Start(meta("80", "alice"), WebSocket)
	for range 10 {
		r.Server(channelMsg(1, strings.Repeat("z", 1<<10), nil))
	}
	why := r.Close()
	if why != StoppedCap {
		t.Fatalf("Close says %q, want %q", why, StoppedCap)
	}
	// A recorder that stopped returns from Close at once, its writer
	// still ending the file.
	<-r.done
	_, ev := readCast(t, filepath.Join(s.cfg.Dir, "c1", "80.cast"))
	if last := ev[len(ev)-1][2].(string); !strings.Contains(last, "recording stopped") {
		t.Errorf("last event %q says nothing of the stop", last)
	}
}

func TestListAndOpen(t *testing.T) {
	s := newStore(t, Config{})
	for _, m := range []Meta{meta("a1", "alice"), meta("b1", "bob")} {
		if why := s.Start(m, WebSocket).Close(); why != "" {
			t.Fatal(why)
		}
	}
	own, err := s.List("c1", "alice", false)
	if err != nil || len(own) != 1 || own[0].ID != "a1" {
		t.Errorf("alice's: %v %v", own, err)
	}
	all, _ := s.List("c1", "alice", true)
	if len(all) != 2 {
		t.Errorf("everyone's: %v", all)
	}
	if _, _, err := s.Open("c1", "b1", "alice", false); !errors.Is(err, ErrNotFound) {
		t.Errorf("alice opened bob's: %v", err)
	}
	f, m, err := s.Open("c1", "b1", "carol", true)
	if err != nil || m.Person != "bob" {
		t.Fatalf("a viewer: %v %v", m, err)
	}
	f.Close()
	for _, id := range []string{"../c1/a1", "..", "A1"} {
		if _, _, err := s.Open("c1", id, "alice", true); !errors.Is(err, ErrNotFound) {
			t.Errorf("id %q: %v", id, err)
		}
	}
	if l, _ := s.List("other", "alice", true); len(l) != 0 {
		t.Errorf("another cluster's: %v", l)
	}
}

func TestSweep(t *testing.T) {
	s := newStore(t, Config{Retention: time.Hour})
	s.Start(meta("01", "alice"), WebSocket).Close()
	s.Start(meta("02", "alice"), WebSocket).Close()
	old := time.Now().Add(-2 * time.Hour)
	os.Chtimes(filepath.Join(s.cfg.Dir, "c1", "01.cast"), old, old)
	if n := s.sweep(time.Now()); n != 1 {
		t.Fatalf("swept %d, want 1", n)
	}
	if l, _ := s.List("c1", "alice", false); len(l) != 1 || l[0].ID != "02" {
		t.Errorf("left %v", l)
	}
}

func TestStartAfterClose(t *testing.T) {
	s := newStore(t, Config{})
	s.Close()
	r := s.Start(meta("90", "alice"), WebSocket)
	r.Server(channelMsg(1, "late", nil))
	if why := r.Close(); why != StoppedUnfinished {
		t.Fatalf("Close says %q, want %q", why, StoppedUnfinished)
	}
}

// TestHeaderHasTheFirstSize: output before kubectl's first resize (a
// shell's prompt) waits for it, so the header says the terminal's size.
func TestHeaderHasTheFirstSize(t *testing.T) {
	s := newStore(t, Config{})
	r := s.Start(meta("91", "alice"), WebSocket)
	r.Server(channelMsg(1, "$ ", nil))
	r.Client(channelMsg(4, `{"Width":120,"Height":50}`, []byte{1, 2, 3, 4}))
	r.Server(channelMsg(1, "x", nil))
	if why := r.Close(); why != "" {
		t.Fatal(why)
	}
	h, ev := readCast(t, filepath.Join(s.cfg.Dir, "c1", "91.cast"))
	if h.Width != 120 || h.Height != 50 || len(ev) != 2 || ev[0][2] != "$ " || ev[1][2] != "x" {
		t.Errorf("header %dx%d, events %v", h.Width, h.Height, ev)
	}
	// No resize at all: the default size, and every event.
	r = s.Start(meta("92", "alice"), WebSocket)
	r.Server(channelMsg(1, "only", nil))
	r.Close()
	h, ev = readCast(t, filepath.Join(s.cfg.Dir, "c1", "92.cast"))
	if h.Width != 80 || h.Height != 24 || len(ev) != 1 {
		t.Errorf("header %dx%d, events %v", h.Width, h.Height, ev)
	}
}
