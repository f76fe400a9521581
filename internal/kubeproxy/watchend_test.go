package kubeproxy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"net/url"
	"testing"

	"github.com/tetherhq/tether/internal/hub"
)

// chunks is a body that gives its pieces one Read at a time.
type chunks struct {
	pieces [][]byte
	i      int
	closed bool
}

func (c *chunks) Read(p []byte) (int, error) {
	if c.closed {
		return 0, errors.New("closed")
	}
	if c.i == len(c.pieces) {
		return 0, io.EOF
	}
	n := copy(p, c.pieces[c.i])
	c.i++
	return n, nil
}

func (c *chunks) Close() error { c.closed = true; return nil }

// split cuts data into pieces of the given sizes, the rest last.
func split(data []byte, sizes ...int) [][]byte {
	var out [][]byte
	for _, n := range sizes {
		out = append(out, data[:n])
		data = data[n:]
	}
	return append(out, data)
}

func pbEvent(payload string) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(payload))), payload...)
}

// TestWatchBodyEndsAtAnEvent: once ended, a watch answer ends at its next
// event's end, wherever the reads split the events: in a JSON event, in a
// protobuf event's length or its bytes, or across several events in one
// read; and an empty protobuf event is an event.
func TestWatchBodyEndsAtAnEvent(t *testing.T) {
	json := []byte("{\"n\":1}\n{\"n\":2}\n{\"n\":3}\n")
	pb := bytes.Join([][]byte{pbEvent("one"), pbEvent(""), pbEvent("three")}, nil)
	for _, tc := range []struct {
		name   string
		frame  framing
		pieces [][]byte
		endAt  int // end is called before this piece is read
		want   string
	}{
		{"JSON, ended between events", jsonLines, split(json, 8, 8), 1, "{\"n\":1}\n"},
		{"JSON, ended in an event", jsonLines, split(json, 3, 13), 1, "{\"n\":1}\n"},
		{"JSON, ended before the first", jsonLines, split(json, 8), 0, ""},
		{"JSON, the rest in one read", jsonLines, split(json, 11), 1, "{\"n\":1}\n{\"n\":2}\n"},
		{"protobuf, in the length", lengthPrefixed, split(pb, 2), 1, string(pbEvent("one"))},
		{"protobuf, in the bytes", lengthPrefixed, split(pb, 5, 1), 1, string(pbEvent("one"))},
		{"protobuf, at an empty event", lengthPrefixed, split(pb, 9), 1, string(pbEvent("one")) + string(pbEvent(""))},
		{"protobuf, byte by byte", lengthPrefixed, split(pb, 1, 1, 1, 1, 1, 1), 3, string(pbEvent("one"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := &chunks{pieces: tc.pieces}
			b := &watchBody{body: body, frame: tc.frame, between: true, forget: func(*watchBody) {}}
			// Each Read takes one piece: end comes before Read number endAt.
			var got []byte
			buf := make([]byte, 64)
			for reads := 0; ; reads++ {
				if reads == tc.endAt {
					b.end()
				}
				n, err := b.Read(buf)
				got = append(got, buf[:n]...)
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatalf("after %q: %v", got, err)
				}
			}
			if string(got) != tc.want {
				t.Errorf("got %q; want %q and a clean end", got, tc.want)
			}
		})
	}
	// Not ended, it passes everything on.
	b := &watchBody{body: &chunks{pieces: split(pb, 3, 4)}, frame: lengthPrefixed, between: true, forget: func(*watchBody) {}}
	if got, err := io.ReadAll(b); err != nil || !bytes.Equal(got, pb) {
		t.Errorf("not ended: %q, %v", got, err)
	}
}

// lateBody is a watch's body whose second Read waits for the next event,
// and is under way when the body is closed: it then brings the part of an
// event that arrived as the hub ended the watch. Reads after that fail.
type lateBody struct {
	first, late []byte
	reads       int
	waiting     chan struct{} // closed when the second Read waits
	closed      chan struct{}
}

func (l *lateBody) Read(p []byte) (int, error) {
	l.reads++
	switch l.reads {
	case 1:
		return copy(p, l.first), nil
	case 2:
		close(l.waiting)
		<-l.closed
		return copy(p, l.late), nil
	}
	return 0, errors.New("use of closed network connection")
}

func (l *lateBody) Close() error {
	select {
	case <-l.closed:
	default:
		close(l.closed)
	}
	return nil
}

// TestWatchBodyEndedAsAnEventArrives: the hub ends a watch between events,
// closing its body under a Read waiting for the next event, just as that
// event starts to arrive. The part of it read is dropped, and the answer
// ends cleanly after the last whole event.
func TestWatchBodyEndedAsAnEventArrives(t *testing.T) {
	for _, tc := range []struct {
		name        string
		frame       framing
		first, late []byte
	}{
		{"JSON", jsonLines, []byte("{\"n\":1}\n"), []byte("{\"n\":")},
		{"protobuf", lengthPrefixed, pbEvent("one"), pbEvent("two")[:5]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := &lateBody{first: tc.first, late: tc.late, waiting: make(chan struct{}), closed: make(chan struct{})}
			b := &watchBody{body: body, frame: tc.frame, between: true, forget: func(*watchBody) {}}
			buf := make([]byte, 64)
			n, err := b.Read(buf)
			if err != nil || !bytes.Equal(buf[:n], tc.first) {
				t.Fatalf("first read: %q, %v", buf[:n], err)
			}
			go func() { <-body.waiting; b.end() }()
			var rest []byte
			for range 3 {
				n, err = b.Read(buf)
				rest = append(rest, buf[:n]...)
				if err != nil {
					break
				}
			}
			if err != io.EOF || len(rest) != 0 {
				t.Errorf("after the end: %q, %v; want nothing more and a clean end", rest, err)
			}
		})
	}
}

// FuzzWatchBody: whatever the API server sends and wherever the reads and
// the end fall, a watch answer passes on a prefix of what came, ended only
// at an event's end: for JSON, after a newline; for protobuf, where the
// lengths say an event ends.
func FuzzWatchBody(f *testing.F) {
	f.Add([]byte("{\"n\":1}\n{\"n\":2}\n"), false, uint8(3), uint8(1))
	f.Add(bytes.Join([][]byte{pbEvent("one"), pbEvent(""), pbEvent("three")}, nil), true, uint8(2), uint8(2))
	f.Fuzz(func(t *testing.T, data []byte, protobuf bool, piece, endAt uint8) {
		frame := jsonLines
		if protobuf {
			frame = lengthPrefixed
		}
		size := int(piece%16) + 1
		var pieces [][]byte
		for rest := data; len(rest) > 0; {
			n := min(size, len(rest))
			pieces = append(pieces, rest[:n])
			rest = rest[n:]
		}
		b := &watchBody{body: &chunks{pieces: pieces}, frame: frame, between: true, forget: func(*watchBody) {}}
		var got []byte
		buf := make([]byte, 64)
		ended := false
		for reads := 0; reads <= len(pieces)+1; reads++ {
			if reads == int(endAt) {
				b.end()
				ended = true
			}
			n, err := b.Read(buf)
			got = append(got, buf[:n]...)
			if err != nil {
				break
			}
		}
		if !bytes.HasPrefix(data, got) {
			t.Fatalf("passed on %q, not a prefix of %q", got, data)
		}
		if !ended || len(got) == len(data) {
			return
		}
		// Cut short: at an event's end.
		if !protobuf {
			if len(got) > 0 && got[len(got)-1] != '\n' {
				t.Fatalf("a JSON watch cut at %q", got)
			}
			return
		}
		for rest := got; len(rest) > 0; {
			if len(rest) < 4 {
				t.Fatalf("a protobuf watch cut in a length: %q", got)
			}
			n := binary.BigEndian.Uint32(rest)
			if uint64(len(rest)-4) < uint64(n) {
				t.Fatalf("a protobuf watch cut in an event: %q", got)
			}
			rest = rest[4+n:]
		}
	})
}

// TestEveryWatchIsTaken: the API server takes watch=<v> for
// a watch unless v is "0" or "false" in any case (apimachinery's
// Convert_Slice_string_To_bool); the Python client sends watch=True. And
// the older /api/v1/watch/... paths are watches with no watch= at all.
// watchFraming knows only "true" and "1", so those watches are not ended at
// an event's end on shutdown: they run for the whole grace, then are cut.
// TestEveryWatchIsTaken: a stopping hub ends at an event's end every answer
// the API server gives as a watch: watch=<anything but 0 or false>, as
// apimachinery reads it (the Python client sends True), and the older
// .../watch/... paths.
func TestEveryWatchIsTaken(t *testing.T) {
	for target, want := range map[string]bool{
		"/api/v1/namespaces/default/pods?watch=true":                   true,
		"/api/v1/namespaces/default/pods?watch=True":                   true,
		"/api/v1/namespaces/default/pods?watch=TRUE&resourceVersion=5": true,
		"/api/v1/namespaces/default/pods?watch":                        true,
		"/api/v1/watch/namespaces/default/pods":                        true,
		"/apis/apps/v1/watch/deployments":                              true,
		"/api/v1/namespaces/default/pods?watch=false":                  false,
		"/api/v1/namespaces/default/pods?watch=0":                      false,
		"/api/v1/namespaces/default/pods?watchers=1":                   false,
		"/api/v1/namespaces/default/pods":                              false,
		"/api/v1/namespaces/watch/pods":                                false,
	} {
		u, _ := url.Parse("https://" + hub.APIServerName + target)
		resp := &http.Response{
			StatusCode: http.StatusOK,
			Header:     http.Header{"Content-Type": {"application/json"}},
			Request:    &http.Request{Method: http.MethodGet, URL: u},
		}
		if _, ok := watchFraming(resp); ok != want {
			t.Errorf("%s: taken for a watch %v, want %v", target, ok, want)
		}
	}
}
