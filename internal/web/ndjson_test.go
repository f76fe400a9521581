package web

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tetherhq/tether/internal/inventory/store"
	"github.com/tetherhq/tether/internal/protocol"
)

// TestFleetResourcesStreamNDJSON: asked for NDJSON, a fleet-wide answer
// sends each cluster's lines as its answer comes, before the slowest
// cluster has answered, and says what it left out on that cluster's end
// line and in the trailer.
func TestFleetResourcesStreamNDJSON(t *testing.T) {
	slow := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !wantsNDJSON(r) {
			t.Errorf("Accept %q not taken for NDJSON", r.Header.Get("Accept"))
		}
		pending := make(chan chan clusterItems, 2)
		quick, late := make(chan clusterItems, 1), make(chan clusterItems, 1)
		pending <- quick
		pending <- late
		close(pending)
		quick <- clusterItems{name: "a", items: []store.Item{{Cluster: "a", Resource: protocol.Resource{ResourceRef: protocol.ResourceRef{Kind: "deployments", Name: "web", Namespace: "shop"}}}}}
		go func() {
			<-slow
			late <- clusterItems{name: "b", leftOut: "it has sent no inventory yet"}
		}()
		streamNDJSON(w, pending, func() {})
	}))
	defer srv.Close()
	req, _ := http.NewRequest("GET", srv.URL, nil)
	req.Header.Set("Accept", "application/x-ndjson, application/json;q=0.5")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != ndjsonType {
		t.Errorf("Content-Type %q", ct)
	}
	lines := bufio.NewScanner(resp.Body)
	next := func() peerLine {
		t.Helper()
		if !lines.Scan() {
			t.Fatalf("the answer ended early: %v", lines.Err())
		}
		var l peerLine
		if err := json.Unmarshal(lines.Bytes(), &l); err != nil {
			t.Fatalf("line %q: %v", lines.Text(), err)
		}
		return l
	}
	// Cluster b hasn't answered: a's lines are here all the same.
	if l := next(); l.Cluster != "a" || len(l.Item) == 0 {
		t.Fatalf("first line %+v, want a's item", l)
	}
	if l := next(); l.Cluster != "a" || !l.End || l.LeftOut != "" {
		t.Fatalf("second line %+v, want a's end", l)
	}
	close(slow)
	if l := next(); l.Cluster != "b" || !l.End || l.LeftOut != "it has sent no inventory yet" {
		t.Errorf("b's line %+v, want its end, saying what was left out", l)
	}
	if lines.Scan() {
		t.Errorf("a line after the last cluster's end: %q", lines.Text())
	}
	if got, want := resp.Trailer.Get(leftOutTrailer), "b (it has sent no inventory yet)"; got != want {
		t.Errorf("trailer %q, want %q", got, want)
	}
}

// FuzzWantsNDJSON: any Accept header is read without fail, and asks for
// NDJSON only when one of its media types is application/x-ndjson.
func FuzzWantsNDJSON(f *testing.F) {
	for _, s := range []string{"", "application/x-ndjson", "application/json", "text/html, application/x-ndjson;q=0.9",
		"APPLICATION/X-NDJSON", "application/x-ndjson-seq", ";;,,", "application/x-ndjson; charset=\"", "*/*"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, accept string) {
		r := httptest.NewRequest("GET", "/api/resources", nil)
		r.Header.Set("Accept", accept)
		if wantsNDJSON(r) && !strings.Contains(strings.ToLower(accept), ndjsonType) {
			t.Fatalf("%q taken for NDJSON", accept)
		}
	})
}
