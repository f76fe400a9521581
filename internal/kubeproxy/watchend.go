package kubeproxy

import (
	"bytes"
	"encoding/binary"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"sync"
)

// A watch never finishes on its own, so a stopping hub would hold every
// one for the whole shutdown grace and then cut it, and clients would see
// an error. Instead, once the hub stops, each watch's answer ends at the
// end of its next event (at once, between events), cleanly: a chunked
// answer's last chunk, or an HTTP/2 stream's end. That is how the API
// server ends its own watches when it stops, and clients watch again from
// the last event they saw.
//
// Events are found by the answer's framing, for the two the API server
// sends: JSON, where each event is a JSON text and a newline, a byte JSON
// text has nowhere else (it escapes newlines in strings); and protobuf,
// where each is a 4-byte big-endian length and that many bytes. Other
// answers (compressed, or another type) run until the grace ends, as
// before.

// watchFraming says how a watch answer's events are framed, and whether
// the hub can find their ends.
func watchFraming(resp *http.Response) (framing, bool) {
	req := resp.Request
	if req == nil || req.Method != http.MethodGet || resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Encoding") != "" {
		return 0, false
	}
	if !isWatch(req.URL.Path, req.URL.RawQuery) {
		return 0, false
	}
	mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil {
		return 0, false
	}
	switch mt {
	case "application/json":
		return jsonLines, true
	case "application/vnd.kubernetes.protobuf":
		return lengthPrefixed, true
	}
	return 0, false
}

// isWatch says whether the API server takes a request for path and query
// for a watch: watch=<v> with any v but "0" or "false" in any case
// (apimachinery's Convert_Slice_string_To_bool; the Python client sends
// watch=True), or one of the older paths under .../v1/watch/.
func isWatch(path, rawQuery string) bool {
	// Each looked at only when it may say so: this runs for every answer.
	if strings.Contains(path, "/watch/") {
		if parts := resourceParts(path); len(parts) > 0 && parts[0] == "watch" {
			return true
		}
	}
	if !strings.Contains(rawQuery, "watch") {
		return false
	}
	q, _ := url.ParseQuery(rawQuery)
	vs, ok := q["watch"]
	return ok && vs[0] != "0" && !strings.EqualFold(vs[0], "false")
}

type framing int

const (
	jsonLines      framing = iota // each event a JSON text and a newline
	lengthPrefixed                // each event a 4-byte big-endian length, then that many bytes
)

// watchBody is a watch answer on its way to the client, which ends at an
// event's end once the hub stops (end).
type watchBody struct {
	body   io.ReadCloser
	frame  framing
	forget func(*watchBody) // takes it off the hub's list, once closed

	mu      sync.Mutex // guards the following
	between bool       // at an event's end, or before the first
	ending  bool       // the hub is stopping
	cut     bool       // end closed body, to wake a Read waiting between events
	hdr     [4]byte    // protobuf: the length read so far
	nhdr    int
	left    uint32 // protobuf: bytes of the event still to come
}

func (b *watchBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	if b.ending && b.between {
		b.mu.Unlock()
		return 0, io.EOF
	}
	b.mu.Unlock()
	n, err := b.body.Read(p)
	b.mu.Lock()
	defer b.mu.Unlock()
	n = b.advance(p[:n])
	if b.ending && b.between {
		return n, io.EOF // what came after the event's end is dropped
	}
	if b.cut {
		// end closed the body between events, and this Read, under way
		// or not, brought only part of the next: drop it, and the answer
		// ends cleanly at the last event's end.
		return 0, io.EOF
	}
	return n, err
}

// advance follows the framing through data, which came next, and returns
// how much of it to pass on: all of it, or once the hub is stopping, up to
// the first event's end.
func (b *watchBody) advance(data []byte) int {
	if len(data) == 0 {
		return 0
	}
	if b.frame == jsonLines {
		// Only newlines matter, and until the hub stops, only the last
		// byte: no loop over every byte of every watch.
		if b.ending {
			if i := bytes.IndexByte(data, '\n'); i >= 0 {
				b.between = true
				return i + 1
			}
		}
		b.between = data[len(data)-1] == '\n'
		return len(data)
	}
	// Protobuf: a 4-byte length, then that many bytes.
	for i := 0; i < len(data); {
		if b.left == 0 {
			// Reading the length.
			b.hdr[b.nhdr] = data[i]
			b.nhdr++
			i++
			if b.nhdr == len(b.hdr) {
				b.left, b.nhdr = binary.BigEndian.Uint32(b.hdr[:]), 0
			}
			b.between = b.nhdr == 0 && b.left == 0 // an empty event
		} else {
			k := min(uint32(len(data)-i), b.left)
			b.left -= k
			i += int(k)
			b.between = b.left == 0
		}
		if b.ending && b.between {
			return i
		}
	}
	return len(data)
}

// end makes the answer end at the next event's end, or now, between
// events: a Read waiting for the next event is woken by closing the body.
func (b *watchBody) end() {
	if b.mark() {
		b.body.Close()
	}
}

// mark is end without the wake: it says whether the body is to be closed
// to wake a Read waiting between events.
func (b *watchBody) mark() (wake bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ending = true
	wake = b.between && !b.cut
	b.cut = b.cut || wake
	return wake
}

func (b *watchBody) Close() error {
	b.forget(b)
	return b.body.Close()
}

// Watches ends the watch answers it tracks at an event's end, once told
// to: the proxy's own, and those a replica carries for another
// (internal/peers). The zero value is ready to use.
type Watches struct {
	mu     sync.Mutex              // guards the following
	m      map[*watchBody]struct{} // watch answers in flight
	ending bool                    // End was called
}

// Track wraps resp's body, if resp is a watch answer, so that End ends it.
func (w *Watches) Track(resp *http.Response) {
	f, ok := watchFraming(resp)
	if !ok {
		return
	}
	b := &watchBody{body: resp.Body, frame: f, between: true, forget: w.forget}
	resp.Body = b
	w.mu.Lock()
	ending := w.ending
	if w.m == nil {
		w.m = map[*watchBody]struct{}{}
	}
	w.m[b] = struct{}{}
	w.mu.Unlock()
	if ending {
		b.end()
	}
}

func (w *Watches) forget(b *watchBody) {
	w.mu.Lock()
	delete(w.m, b)
	w.mu.Unlock()
}

// End ends every watch answer in flight at its next event's end, and those
// tracked from now on at once.
func (w *Watches) End() {
	w.mu.Lock()
	w.ending = true
	all := make([]*watchBody, 0, len(w.m))
	for b := range w.m {
		all = append(all, b)
	}
	w.mu.Unlock()
	// Every watch is marked before any is woken, so that none passes on
	// an event that comes after another watch has already ended.
	var wake []*watchBody
	for _, b := range all {
		if b.mark() {
			wake = append(wake, b)
		}
	}
	for _, b := range wake {
		b.body.Close()
	}
}

// trackWatch wraps a watch answer's body so that EndWatches ends it.
func (px *Proxy) trackWatch(resp *http.Response) { px.watches.Track(resp) }

// EndWatches ends every watch answer in flight at its next event's end,
// and those that start from now on at once: a stopping hub calls it as it
// stops taking requests, so that none of them holds it for the whole grace.
func (px *Proxy) EndWatches() { px.watches.End() }
