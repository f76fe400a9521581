package watch

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/tetherhq/tether/internal/inventory"
	"github.com/tetherhq/tether/internal/protocol"
)

// followReflector is a reflector of pods that follows watches handed to it,
// with events of at most max bytes, counting the changes it reports.
func followReflector(max int, changes *int, errs *[]error) *reflector {
	k, _ := inventory.LookupKind("pods")
	r := newReflector(apiServer{}, k, k.Versions[0], "", func(err error) {
		if err != nil {
			*errs = append(*errs, err)
		}
	}, func(protocol.ResourceRef) { *changes++ })
	r.pageBytes = max
	return r
}

func podEvent(typ, name, rv string, pad int) string {
	return `{"type":"` + typ + `","object":{"metadata":{"name":"` + name + `","namespace":"shop","resourceVersion":"` + rv +
		`","annotations":{"pad":"` + strings.Repeat("x", pad) + `"}}}}` + "\n"
}

// TestWatchEventLargerThanAPageEndsTheWatch: a watch event larger than a
// page of a list may be ends the watch with an error that says so, without
// reading the rest of it into memory; the events before it are applied.
func TestWatchEventLargerThanAPageEndsTheWatch(t *testing.T) {
	var changes int
	var errs []error
	r := followReflector(64<<10, &changes, &errs)
	// The second event never ends: a stream of 1 GiB of one string.
	body := io.MultiReader(strings.NewReader(podEvent("ADDED", "web", "7", 100)),
		strings.NewReader(`{"type":"ADDED","object":{"metadata":{"name":"`), &endless{})
	counted := &countingReader{r: body}
	rv, gone, err := r.follow(t.Context(), counted, "1")
	if !errors.Is(err, errEventTooLarge) || gone || rv != "7" {
		t.Fatalf("follow: rv %q, gone %v, %v; want rv 7 and %v", rv, gone, err, errEventTooLarge)
	}
	if len(errs) != 1 || !errors.Is(errs[0], errEventTooLarge) {
		t.Errorf("errors noted: %v; want the event too large", errs)
	}
	if changes != 1 || len(r.all()) != 1 {
		t.Errorf("%d changes, %d summaries; want the first event's", changes, len(r.all()))
	}
	// The decoder reads ahead in pieces, up to twice what it holds.
	if counted.n > 4*r.pageBytes {
		t.Errorf("read %d bytes of the watch; want at most about %d", counted.n, r.pageBytes)
	}

	// Events as large as the bound, one after another, are all read.
	changes, errs = 0, nil
	r = followReflector(64<<10, &changes, &errs)
	var many bytes.Buffer
	for i := range 20 {
		many.WriteString(podEvent("ADDED", "web-"+string(rune('a'+i)), "9", 60<<10))
	}
	if _, _, err := r.follow(t.Context(), &many, "1"); err != nil || changes != 20 || len(errs) != 0 {
		t.Errorf("20 events of 60 KiB under a bound of 64 KiB: %v, %d changes, %v", err, changes, errs)
	}
}

type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	return len(p), nil
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// FuzzFollowWatch feeds a reflector a watch of any bytes, as an API server
// (or anything between it and the agent) might send: it never panics,
// keeps only named summaries under their own key, reports a change for
// every summary it keeps, and reads no event over its bound.
func FuzzFollowWatch(f *testing.F) {
	f.Add([]byte(podEvent("ADDED", "web", "3", 0) + podEvent("MODIFIED", "web", "4", 2) + podEvent("BOOKMARK", "", "5", 0)))
	f.Add([]byte(podEvent("ADDED", "a", "3", 0) + podEvent("DELETED", "a", "4", 0) + `{"type":"ERROR","object":{"code":410}}`))
	f.Add([]byte(`{"type":"ERROR","object":{"code":"x","message":7}}{"type":"ADDED","object":null}`))
	f.Add([]byte(`{"type":"ADDED","object":{"metadata":{"name":""}}} [] 7 {"type":"MODIFIED"`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var changes int
		var errs []error
		r := followReflector(1<<10, &changes, &errs)
		counted := &countingReader{r: bytes.NewReader(b)}
		_, _, err := r.follow(t.Context(), counted, "1")
		if errors.Is(err, errEventTooLarge) && counted.n <= r.pageBytes {
			t.Fatalf("event too large after reading %d bytes, under the bound", counted.n)
		}
		items := r.all()
		if len(items) > changes {
			t.Fatalf("%d summaries kept, %d changes reported", len(items), changes)
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		for key, res := range r.items {
			want := res.Name
			if res.Namespace != "" {
				want = res.Namespace + "/" + res.Name
			}
			if res.Name == "" || key != want || res.Kind != "pods" {
				t.Fatalf("kept %+v under %q", res.ResourceRef, key)
			}
		}
	})
}
