package server

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/hub"
	"github.com/tetherhq/tether/internal/testutil/fakecluster"
)

// TestStreamsPerAgentBound: once people's requests hold MaxStreamsPerAgent
// streams open through a cluster's agent, the next is answered 429 with
// Retry-After and a Status naming the bound, counted and audited; the
// hub's own probes still get streams of their own, so the cluster stays
// Ready; and the streams come back as the requests end (issue 33, item 2).
func TestStreamsPerAgentBound(t *testing.T) {
	const limit = 4
	fc := fakecluster.New(t)
	h, audit := proxyHub(t, fc, "tether:", func(c *Config) { c.MaxStreamsPerAgent = limit })
	eventually(t, 5*time.Second, "open is Ready", func() bool { return statusOf(h, "open") == hub.Ready })

	// Alice's watches fill the bound. One may be refused while a probe
	// holds a stream for a moment: she sends it again, as client-go does.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	watches := make(chan *http.Response, limit)
	for tries := 0; fc.Watching.Load() < limit; tries++ {
		if tries == 100 {
			t.Fatalf("%d watches open after 100 tries, want %d", fc.Watching.Load(), limit)
		}
		req, _ := http.NewRequestWithContext(ctx, "GET", h.url+"/clusters/open/watch", nil)
		req.Header.Set("Authorization", "Bearer "+aliceToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		switch resp.StatusCode {
		case http.StatusOK:
			watches <- resp
		case http.StatusTooManyRequests:
			resp.Body.Close()
		default:
			t.Fatalf("alice's watch: %s", resp.Status)
		}
		eventually(t, 5*time.Second, "the watch at the API server", func() bool { return fc.Watching.Load() == int32(len(watches)) })
	}
	defer func() {
		cancel()
		for range len(watches) {
			(<-watches).Body.Close()
		}
	}()
	probesBefore := slices.Collect(maps.Keys(fc.ConnsFor("/readyz")))

	// Bob's request finds none left.
	code, body, header := call(t, "GET", h.url+"/clusters/open/api/v1/namespaces", bobToken, nil)
	if code != http.StatusTooManyRequests {
		t.Fatalf("past the bound: %d %s, want 429", code, body)
	}
	if got := header.Get("Retry-After"); got != "5" {
		t.Errorf("Retry-After %q, want 5", got)
	}
	var st struct{ Kind, Reason, Message string }
	if err := json.Unmarshal([]byte(body), &st); err != nil || st.Kind != "Status" || st.Reason != "TooManyRequests" ||
		!strings.Contains(st.Message, "TETHER_MAX_STREAMS_PER_AGENT") || !strings.Contains(st.Message, "4 requests") {
		t.Errorf("past the bound: %s, want a Status naming TETHER_MAX_STREAMS_PER_AGENT and its 4", body)
	}
	if got := h.value("tether_streams_refused_total", "open"); got < 1 {
		t.Errorf("tether_streams_refused_total{cluster=open} = %v, want at least 1", got)
	}
	eventually(t, 5*time.Second, "bob's 429 in the audit", func() bool {
		for l := range strings.Lines(audit.String()) {
			if strings.Contains(l, `"person":"bob"`) && strings.Contains(l, `"status":429`) {
				return true
			}
		}
		return false
	})

	// Bob never rides a connection the hub keeps for its own probes:
	// those streams are not the people's.
	for range 5 {
		if code, body, _ := call(t, "GET", h.url+"/clusters/open/api/v1/namespaces", bobToken, nil); code != http.StatusTooManyRequests {
			t.Fatalf("past the bound: %d %s, want 429", code, body)
		}
	}

	// The probes' kept connection goes: the next probe needs a stream of
	// its own, with the people at their bound.
	h.registry.CloseIdle("open")
	eventually(t, 10*time.Second, "a probe on a new connection", func() bool {
		for k := range fc.ConnsFor("/readyz") {
			if !slices.Contains(probesBefore, k) {
				return true
			}
		}
		return false
	})
	if got := statusOf(h, "open"); got != hub.Ready {
		t.Fatalf("with people at the bound, open is %q, want Ready", got)
	}

	// The watches end, and their streams are given back.
	cancel()
	eventually(t, 5*time.Second, "the watches end at the API server", func() bool { return fc.Watching.Load() == 0 })
	eventually(t, 5*time.Second, "bob gets through", func() bool {
		code, _, _ := call(t, "GET", h.url+"/clusters/open/api/v1/namespaces", bobToken, nil)
		return code == http.StatusOK
	})
}
