//go:build unix

package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"sync"
	"time"
)

// maxLine is where a line without a newline is cut into a partial entry,
// as container runtimes cut them.
const maxLine = 16 << 10

// logFile is one container run's log in the CRI logging format, one entry
// a line: "<RFC3339Nano time> <stdout|stderr> <F|P> <text>", where P marks
// a piece of a longer line. It carries what `kubectl logs` can ask for:
// timestamps, one stream, partial lines.
type logFile struct {
	path string

	mu      sync.Mutex // guards the following
	f       *os.File
	partial map[string][]byte // per stream, the text after its last newline
	changed chan struct{}     // closed and replaced on every write
	closed  bool
}

func createLog(path string) (*logFile, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	return &logFile{path: path, f: f, partial: make(map[string][]byte), changed: make(chan struct{})}, nil
}

// write logs p from stream: each full line an F entry, a line that grows
// past maxLine P entries; the rest waits for its newline.
func (l *logFile) write(stream string, p []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	buf := append(l.partial[stream], p...)
	var out []byte
	now := time.Now().UTC().Format(time.RFC3339Nano)
	for {
		i := bytes.IndexByte(buf, '\n')
		if i < 0 {
			break
		}
		out = appendEntry(out, now, stream, "F", buf[:i])
		buf = buf[i+1:]
	}
	for len(buf) >= maxLine {
		out = appendEntry(out, now, stream, "P", buf[:maxLine])
		buf = buf[maxLine:]
	}
	l.partial[stream] = append([]byte(nil), buf...)
	l.emitLocked(out)
}

func appendEntry(out []byte, ts, stream, tag string, text []byte) []byte {
	out = append(out, ts...)
	out = append(out, ' ')
	out = append(out, stream...)
	out = append(out, ' ')
	out = append(out, tag...)
	out = append(out, ' ')
	out = append(out, text...)
	return append(out, '\n')
}

func (l *logFile) emitLocked(entries []byte) {
	if len(entries) == 0 {
		return
	}
	// One write per batch: a reader sees whole entries or the start of one.
	l.f.Write(entries)
	close(l.changed)
	l.changed = make(chan struct{})
}

// close writes what is left of unfinished lines, as full lines (the run
// is over; runtimes do the same), and wakes followers for the last time.
func (l *logFile) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	var out []byte
	now := time.Now().UTC().Format(time.RFC3339Nano)
	for _, stream := range []string{"stdout", "stderr"} {
		if b := l.partial[stream]; len(b) > 0 {
			out = appendEntry(out, now, stream, "F", b)
		}
	}
	l.emitLocked(out)
	l.f.Close()
	l.closed = true
	close(l.changed)
}

// state returns a channel that closes at the next write, and whether the
// log is complete.
func (l *logFile) state() (<-chan struct{}, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.changed, l.closed
}

// logOptions are the kubelet's /containerLogs parameters.
type logOptions struct {
	follow     bool
	timestamps bool
	tail       int64     // lines from the end; negative: all
	limit      int64     // bytes at most; zero: no limit
	since      time.Time // entries before it are left out
	stream     string    // "stdout", "stderr", or "" for both
}

type entry struct {
	ts     string
	stream string
	full   bool
	text   []byte
}

func parseEntry(line []byte) (entry, bool) {
	f := bytes.SplitN(bytes.TrimSuffix(line, []byte("\n")), []byte(" "), 4)
	if len(f) != 4 {
		return entry{}, false
	}
	return entry{ts: string(f[0]), stream: string(f[1]), full: string(f[2]) == "F", text: f[3]}, true
}

func (o logOptions) wants(e entry) bool {
	if o.stream != "" && e.stream != o.stream {
		return false
	}
	if !o.since.IsZero() {
		if t, err := time.Parse(time.RFC3339Nano, e.ts); err == nil && t.Before(o.since) {
			return false
		}
	}
	return true
}

// errLimit ends a copy at limitBytes.
var errLimit = errors.New("limitBytes reached")

// copyLog writes the log as the options ask. Following, it returns when the
// run is over and all of it was written, or when ctx ends.
func copyLog(ctx context.Context, l *logFile, o logOptions, w io.Writer) error {
	f, err := os.Open(l.path)
	if err != nil {
		return err
	}
	defer f.Close()
	if o.tail >= 0 {
		off, err := tailOffset(f, o)
		if err != nil {
			return err
		}
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			return err
		}
	}
	written := int64(0)
	emit := func(e entry) error {
		var out []byte
		if o.timestamps {
			out = append(out, e.ts...)
			out = append(out, ' ')
		}
		out = append(out, e.text...)
		if e.full {
			out = append(out, '\n')
		}
		if o.limit > 0 && written+int64(len(out)) >= o.limit {
			w.Write(out[:o.limit-written])
			return errLimit
		}
		written += int64(len(out))
		_, err := w.Write(out)
		return err
	}
	r := bufio.NewReader(f)
	var pending []byte // an entry read only in part: its writer is mid-write
	for {
		changed, closed := l.state()
		for {
			line, err := r.ReadBytes('\n')
			pending = append(pending, line...)
			if err != nil {
				break // io.EOF: all there is for now
			}
			if e, ok := parseEntry(pending); ok && o.wants(e) {
				if err := emit(e); err != nil {
					return ignoreLimit(err)
				}
			}
			pending = pending[:0]
		}
		if !o.follow || closed {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
	}
}

func ignoreLimit(err error) error {
	if errors.Is(err, errLimit) {
		return nil
	}
	return err
}

// tailOffset returns where the last o.tail lines the options want begin.
func tailOffset(f *os.File, o logOptions) (int64, error) {
	var starts []int64 // offsets of wanted entries that begin a line
	lineStart := map[string]bool{"stdout": true, "stderr": true}
	r := bufio.NewReader(f)
	off := int64(0)
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 && line[len(line)-1] == '\n' {
			if e, ok := parseEntry(line); ok {
				if lineStart[e.stream] && o.wants(e) {
					starts = append(starts, off)
				}
				lineStart[e.stream] = e.full
			}
		}
		off += int64(len(line))
		if err != nil {
			break
		}
	}
	if int64(len(starts)) <= o.tail {
		return 0, nil
	}
	if o.tail == 0 {
		return off, nil
	}
	return starts[int64(len(starts))-o.tail], nil
}
