// Package recording records people's exec and attach sessions with a
// terminal as asciicast v2 files (issue 37), from the bytes the hub relays
// between kubectl and the cluster: Kubernetes' channel WebSocket
// (websocket.go) or SPDY/3.1 (spdy.go), written by cast.go. A recording
// never slows its session: the hub hands it copies of the bytes, which it
// queues up to a bound and parses and writes on a goroutine of its own;
// when the queue is full, the disk is or the file reaches its cap, the
// recording stops (the file says so) and the session goes on.
package recording

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Config is everything a Store needs. Zero values take the defaults.
type Config struct {
	// Dir holds the recordings, one directory per cluster.
	Dir string
	// All records sessions without a terminal too (kubectl cp is tar over
	// exec: secrets and gigabytes); otherwise only those with one.
	All bool
	// MaxBytes caps each recording's file. Zero means 64 MiB.
	MaxBytes int64
	// Retention is how long a recording is kept. Zero means 30 days.
	Retention time.Duration
	// SweepEvery is how often recordings past Retention are deleted.
	// Zero means an hour.
	SweepEvery time.Duration
	// QueueBytes bounds what each recording holds that it hasn't written
	// yet. Zero means 4 MiB.
	QueueBytes int
	// CloseWait bounds how long the end of a session waits for its
	// recording to be written, for its audit line. Zero means 5 s.
	CloseWait time.Duration
	Logger    *slog.Logger
	// Create opens a recording's file; nil creates it in Dir. Tests give a
	// writer that fails or never returns.
	Create func(path string) (io.WriteCloser, error)
}

// Store keeps the recordings of one hub replica.
type Store struct {
	cfg  Config
	log  *slog.Logger
	wg   sync.WaitGroup // the sweep and every recording's writer
	stop chan struct{}

	mu     sync.Mutex // guards closed, and wg.Add against Close's Wait
	closed bool
}

// New returns a Store writing under cfg.Dir, and starts its retention
// sweep. Call Close when the hub stops.
func New(cfg Config) (*Store, error) {
	if cfg.Dir == "" {
		return nil, errors.New("recording: no directory")
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = 64 << 20
	}
	if cfg.Retention == 0 {
		cfg.Retention = 30 * 24 * time.Hour
	}
	if cfg.SweepEvery == 0 {
		cfg.SweepEvery = time.Hour
	}
	if cfg.QueueBytes == 0 {
		cfg.QueueBytes = 4 << 20
	}
	if cfg.CloseWait == 0 {
		cfg.CloseWait = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Create == nil {
		cfg.Create = func(path string) (io.WriteCloser, error) {
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				return nil, err
			}
			return os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		}
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("recording: TETHER_RECORDINGS_DIR %q: %w", cfg.Dir, err)
	}
	s := &Store{cfg: cfg, log: cfg.Logger, stop: make(chan struct{})}
	s.wg.Add(1)
	go s.sweepLoop()
	return s, nil
}

// Close stops the sweep and waits for every recording's writer.
func (s *Store) Close() {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.stop)
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// Wants says whether a session with a terminal (tty) or without is to be
// recorded.
func (s *Store) Wants(tty bool) bool { return tty || s.cfg.All }

// Protocol is how a session's bytes are framed.
type Protocol int

const (
	WebSocket       Protocol = iota + 1 // channel.k8s.io, v4/v5.channel.k8s.io
	WebSocketBase64                     // base64.channel.k8s.io
	SPDY                                // SPDY/3.1
)

// ProtocolOf is the protocol an upgrade's answer agreed on, from its
// Upgrade and Sec-WebSocket-Protocol headers; false for one Tether can't
// record (port-forward's SPDY tunnelled in WebSocket, say).
func ProtocolOf(upgrade, subprotocol string) (Protocol, bool) {
	switch {
	case strings.EqualFold(upgrade, "SPDY/3.1"):
		return SPDY, true
	case !strings.EqualFold(upgrade, "websocket"):
		return 0, false
	case subprotocol == "base64.channel.k8s.io":
		return WebSocketBase64, true
	case subprotocol == "channel.k8s.io" || strings.HasSuffix(subprotocol, ".channel.k8s.io"):
		return WebSocket, true
	}
	return 0, false
}

// Why a recording stopped, as its audit line says (recordingStopped).
const (
	StoppedBehind     = "behind"     // the writer fell QueueBytes behind the session
	StoppedCap        = "cap"        // the file reached MaxBytes
	StoppedDisk       = "disk"       // the file couldn't be created or written (a full disk)
	StoppedUnreadable = "unreadable" // the stream wasn't what its protocol says
	StoppedUnfinished = "unfinished" // still being written CloseWait after the session ended
)

var stoppedWords = map[string]string{
	StoppedBehind:     "the disk fell behind the session, which went on unrecorded",
	StoppedCap:        "the recording reached its size limit (TETHER_RECORDINGS_MAX_BYTES)",
	StoppedDisk:       "the recording could not be written",
	StoppedUnreadable: "the session's stream could not be read",
}

// validName says whether a cluster's name or a recording's id can name a
// file: a cluster's name is a DNS label, an id hex.
func validName(s string) bool {
	if s == "" || len(s) > 253 || s == "." || s == ".." {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// Start begins recording the session meta names, framed as proto. The
// caller hands it the session's bytes (Client, Server) and Closes it at
// the session's end. It never fails the session: a file that can't be
// created gives a recorder already stopped.
func (s *Store) Start(meta Meta, proto Protocol) *Recorder {
	r := &Recorder{id: meta.ID, store: s, max: s.cfg.QueueBytes, wake: make(chan struct{}, 1), done: make(chan struct{})}
	if !validName(meta.Cluster) || !validName(meta.ID) {
		r.stopped = StoppedDisk
		close(r.done)
		return r
	}
	path := filepath.Join(s.cfg.Dir, meta.Cluster, meta.ID+".cast")
	f, err := s.cfg.Create(path)
	if err != nil {
		s.log.Error("Can't create a recording", "cluster", meta.Cluster, "request", meta.ID, "err", err)
		r.stopped = StoppedDisk
		close(r.done)
		return r
	}
	d, err := newDecoder(proto)
	if err != nil {
		f.Close()
		r.stopped = StoppedUnreadable
		close(r.done)
		return r
	}
	if meta.Time.IsZero() {
		meta.Time = time.Now()
	}
	meta.Time = meta.Time.UTC()
	cw := &castWriter{w: bufio.NewWriterSize(f, 32<<10), meta: meta, start: meta.Time}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		// A session that began as the hub stopped: its file stays empty.
		f.Close()
		r.stopped = StoppedUnfinished
		close(r.done)
		return r
	}
	s.wg.Add(1)
	go r.run(f, cw, d)
	return r
}

// Recorder records one session.
type Recorder struct {
	id    string
	store *Store
	max   int
	wake  chan struct{} // a token when chunks or closing change
	done  chan struct{} // closed when run has returned

	mu      sync.Mutex // guards the following
	chunks  []chunk
	queued  int
	closing bool
	stopped string // why it stopped; "" while it records
}

type chunk struct {
	client bool
	at     time.Time
	b      []byte
}

// ID is the recording's id: its session's request id.
func (r *Recorder) ID() string { return r.id }

// Client takes a copy of bytes the client sent; Server, of bytes sent to
// the client. Neither waits for the disk: past the queue's bound the
// recording stops instead.
func (r *Recorder) Client(b []byte) { r.add(true, b) }
func (r *Recorder) Server(b []byte) { r.add(false, b) }

func (r *Recorder) add(client bool, b []byte) {
	if len(b) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped != "" || r.closing {
		return
	}
	if r.queued+len(b) > r.max {
		r.stopped = StoppedBehind
		r.chunks, r.queued = nil, 0
	} else {
		r.chunks = append(r.chunks, chunk{client: client, at: time.Now(), b: append([]byte(nil), b...)})
		r.queued += len(b)
	}
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Close ends the recording once what it holds is written, waiting at
// most CloseWait, and says why it stopped before the session's end, ""
// when it didn't. A recorder already stopped returns at once, its writer
// left to end on its own (the Store waits for it). Close may be called
// twice.
func (r *Recorder) Close() (stopped string) {
	r.mu.Lock()
	r.closing = true
	stopped = r.stopped
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
	if stopped != "" {
		return stopped
	}
	t := time.NewTimer(r.store.cfg.CloseWait)
	defer t.Stop()
	select {
	case <-r.done:
	case <-t.C:
		r.mu.Lock()
		if r.stopped == "" {
			r.stopped = StoppedUnfinished
		}
		r.mu.Unlock()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stopped
}

// run parses and writes what the session hands over, until Close, or
// until the recording stops. It alone writes f.
func (r *Recorder) run(f io.WriteCloser, cw *castWriter, d *decoder) {
	defer r.store.wg.Done()
	defer close(r.done)
	stop := func(why string, err error) {
		r.mu.Lock()
		if r.stopped == "" {
			r.stopped = why
		}
		why = r.stopped
		r.mu.Unlock()
		// Said once per recording, where operators look: the audit line
		// says it too (recordingStopped).
		if err != nil {
			r.store.log.Warn("A recording stopped before its session", "request", r.id, "reason", why, "err", err)
		} else {
			r.store.log.Warn("A recording stopped before its session", "request", r.id, "reason", why)
		}
		if why != StoppedDisk {
			cw.event(time.Now(), 'o', []byte("\r\n[Tether: recording stopped: "+stoppedWords[why]+"]\r\n"))
			cw.finish()
		}
		cw.w.Flush()
		f.Close()
	}
	for {
		select {
		case <-r.wake:
		case <-r.store.stop:
			// The hub stops: what is queued is written, then the file ends.
			r.mu.Lock()
			r.closing = true
			r.mu.Unlock()
		}
		r.mu.Lock()
		cs, closing, stopped := r.chunks, r.closing, r.stopped
		r.chunks, r.queued = nil, 0
		r.mu.Unlock()
		if stopped != "" {
			stop(stopped, nil)
			return
		}
		for _, c := range cs {
			if err := d.feed(c, cw); err != nil {
				why := StoppedDisk
				if !errors.Is(err, errWrite) {
					why = StoppedUnreadable
				}
				stop(why, err)
				return
			}
			if cw.written+int64(len(cw.held)) > r.store.cfg.MaxBytes {
				stop(StoppedCap, nil)
				return
			}
		}
		if err := cw.w.Flush(); err != nil {
			stop(StoppedDisk, err)
			return
		}
		if closing {
			err := cw.finish()
			if ferr := cw.w.Flush(); err == nil {
				err = ferr
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				r.mu.Lock()
				if r.stopped == "" {
					r.stopped = StoppedDisk
				}
				r.mu.Unlock()
			}
			return
		}
	}
}

// errWrite marks an error of the file's, not the stream's.
var errWrite = errors.New("write")

// decoder turns a session's bytes into asciicast events.
type decoder struct {
	client, server interface {
		feed([]byte, func(int, []byte)) error
	}
}

func newDecoder(proto Protocol) (*decoder, error) {
	switch proto {
	case WebSocket, WebSocketBase64:
		b64 := proto == WebSocketBase64
		return &decoder{client: newWSParser(b64), server: newWSParser(b64)}, nil
	case SPDY:
		streams := &spdyStreams{}
		c, err := newSPDYParser(streams)
		if err != nil {
			return nil, err
		}
		sv, err := newSPDYParser(streams)
		if err != nil {
			return nil, err
		}
		return &decoder{client: c, server: sv}, nil
	}
	return nil, fmt.Errorf("recording: protocol %d", proto)
}

func (d *decoder) feed(c chunk, cw *castWriter) error {
	var werr error
	emit := func(ch int, data []byte) {
		if werr != nil {
			return
		}
		switch {
		case c.client && ch == chanStdin:
			werr = cw.event(c.at, 'i', data)
		case c.client && ch == chanResize:
			for _, sz := range resizes(data) {
				if werr = cw.event(c.at, 'r', []byte(sz)); werr != nil {
					return
				}
			}
		case !c.client && (ch == chanStdout || ch == chanStderr):
			werr = cw.event(c.at, 'o', data)
		}
	}
	p := d.server
	if c.client {
		p = d.client
	}
	if err := p.feed(c.b, emit); err != nil {
		return err
	}
	if werr != nil {
		return fmt.Errorf("%w: %w", errWrite, werr)
	}
	return nil
}

// resizes reads the terminal sizes in a resize message: one JSON object
// {"Width":…,"Height":…} or more (SPDY's stream carries a sequence), as
// "WxH".
func resizes(data []byte) []string {
	var out []string
	dec := json.NewDecoder(strings.NewReader(string(data)))
	for {
		var sz struct{ Width, Height uint16 }
		if err := dec.Decode(&sz); err != nil {
			return out
		}
		if sz.Width > 0 && sz.Height > 0 {
			out = append(out, fmt.Sprintf("%dx%d", sz.Width, sz.Height))
		}
	}
}
