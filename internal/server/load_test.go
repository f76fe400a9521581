package server

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/testutil/fakecluster"
)

// quietHub is for tests that count goroutines and descriptors: no probes
// between the test's own requests, and connections to the API server
// closed soon after their last use.
func quietHub(c *Config) {
	c.ProbeInterval = time.Hour
	c.IdleTimeout = 200 * time.Millisecond
}

// resources is what a leak would leave behind.
type resources struct{ goroutines, fds int }

func measure() resources {
	fds := -1
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		fds = len(ents)
	}
	return resources{goroutines: runtime.NumGoroutine(), fds: fds}
}

// leakSlack is how far above the baseline goroutines and descriptors may
// settle: timers and pollers of the runtime and test framework, not one per
// request.
const leakSlack = 8

// settles waits until the hub's streams are all closed and goroutines and
// descriptors are back to base, and logs the figures for RELIABILITY.md.
func settles(t *testing.T, h *testHub, base resources, within time.Duration) {
	t.Helper()
	start := time.Now()
	var now resources
	eventually(t, within, "streams, goroutines and descriptors back to baseline", func() bool {
		now = measure()
		return h.streamsOpen() == 0 &&
			h.value("tether_streams_opened_total") == h.value("tether_streams_closed_total") &&
			now.goroutines <= base.goroutines+leakSlack && now.fds <= base.fds+leakSlack
	})
	t.Logf("settled in %s: goroutines %d (baseline %d), fds %d (baseline %d), streams opened %v = closed %v",
		time.Since(start).Round(time.Millisecond), now.goroutines, base.goroutines, now.fds, base.fds,
		h.value("tether_streams_opened_total"), h.value("tether_streams_closed_total"))
}

// getAs starts a GET as alice on the hub.
func getAs(ctx context.Context, client *http.Client, url string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+aliceToken)
	return client.Do(req)
}

func TestCancelStorm(t *testing.T) {
	fc := fakecluster.New(t)
	// Heartbeats every 5 s, not 1: a thousand TLS handshakes with -race on
	// a busy two-core machine can hold up a pong for seconds.
	// One person holds all thousand: their bound is raised to that, and
	// the agent's (past DefaultMaxStreamsPerAgent they would be answered 429).
	h, _ := proxyHub(t, fc, "", quietHub, func(c *Config) {
		c.Heartbeat = 5 * time.Second
		c.Limits.Requests = 1000
		c.MaxStreamsPerAgent = 1000
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the hub's log:\n%s\nthe agent's log:\n%s", h.logs, h.agents["open"].Logs)
		}
	})
	tr := &http.Transport{DisableKeepAlives: true}
	client := &http.Client{Transport: tr}
	base := measure()

	const n, batch = 1000, 100
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ended := make(chan error, n)
	startWait := time.Now()
	// In batches of 100, each in flight before the next starts: a thousand
	// TLS handshakes at once, with -race on a busy two-core machine, starve
	// every other goroutine of this one process (hub, agent and API server
	// alike) for tens of seconds, heartbeats included.
	for range n / batch {
		var started sync.WaitGroup
		started.Add(batch)
		for range batch {
			go func() {
				resp, err := getAs(ctx, client, h.url+"/clusters/open/stream")
				if err == nil && resp.StatusCode != http.StatusOK {
					err = errors.New(resp.Status)
				}
				if err != nil {
					started.Done()
					ended <- err
					return
				}
				line, err := bufio.NewReader(resp.Body).ReadString('\n')
				started.Done()
				if err != nil || line != "event 1\n" {
					ended <- errors.New("no first event")
					resp.Body.Close()
					return
				}
				_, err = io.Copy(io.Discard, resp.Body) // until the cancel
				resp.Body.Close()
				if err == nil {
					err = errors.New("the stream ended by itself")
				}
				ended <- err
			}()
		}
		waitGroup(t, &started, time.Minute, "a batch of requests in flight")
	}
	t.Logf("%d requests in flight after %s; streams open %v", n, time.Since(startWait).Round(time.Millisecond), h.streamsOpen())
	if got := h.streamsOpen(); got != n {
		t.Fatalf("streams open = %v with %d requests in flight", got, n)
	}

	cancelAt := time.Now()
	cancel()
	for range n {
		select {
		case err := <-ended:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("a request ended with %v, want its cancel", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a cancelled request hangs")
		}
	}
	t.Logf("all %d cancelled requests returned %s after the cancel", n, time.Since(cancelAt).Round(time.Millisecond))
	tr.CloseIdleConnections()
	settles(t, h, base, 30*time.Second)
	if status, _, _ := call(t, "GET", h.url+"/clusters/open/api", aliceToken, nil); status != http.StatusOK {
		t.Fatalf("after the storm: %d", status)
	}
}

// TestSlowReaderDoesNotLeak: a client that reads a little of an endless
// answer and stops. Every buffer on the way fills and then the API server
// is held back: the hub buffers a bounded amount, not the answer. Requests
// to the same agent meanwhile take about as long as they did without it
// (medians, against the same requests before and after the stall, in this
// test: no absolute time). Once the reader leaves, everything is given back.
func TestSlowReaderDoesNotLeak(t *testing.T) {
	fc := fakecluster.New(t)
	h, _ := proxyHub(t, fc, "", quietHub)
	tr := &http.Transport{DisableKeepAlives: true}
	client := &http.Client{Transport: tr}
	// medianRequest times 21 small requests through the same agent and
	// returns the median. The context is only a guard against a hang.
	medianRequest := func(what string) time.Duration {
		t.Helper()
		var took []time.Duration
		for i := range 21 {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			start := time.Now()
			status, _, _ := callWithin(t, ctx, "GET", h.url+"/clusters/open/api", aliceToken, nil)
			took = append(took, time.Since(start))
			cancel()
			if status != http.StatusOK {
				t.Fatalf("request %d %s: %d", i, what, status)
			}
		}
		slices.Sort(took)
		return took[len(took)/2]
	}
	before := medianRequest("before the stall")
	base := measure()

	resp, err := getAs(context.Background(), client, h.url+"/clusters/open/big")
	if err != nil {
		t.Fatal(err)
	}
	const read = 64 << 10
	if _, err := io.ReadFull(resp.Body, make([]byte, read)); err != nil {
		t.Fatal(err)
	}
	// The reader stalls. The API server is held back once every buffer on
	// its way is full (the client's socket, the hub's stream window, the
	// agent's): /big stops sending. A hub that buffered without bound would
	// take it all, and the source would never stop.
	held := func() int64 { return fc.BigSent.Load() - read }
	deadline := time.Now().Add(30 * time.Second)
	for last, still := int64(-1), 0; still < 3; {
		time.Sleep(100 * time.Millisecond)
		if n := fc.BigSent.Load(); n == last {
			still++
		} else {
			last, still = n, 0
		}
		if time.Now().After(deadline) {
			t.Fatalf("the API server still sends 30 s into the stall, %d MiB past what the client read: nothing holds it back", held()>>20)
		}
	}
	t.Logf("the stalled answer holds %.1f MiB between the API server and the client", float64(held())/(1<<20))

	beside := medianRequest("beside the stalled reader")
	resp.Body.Close()
	tr.CloseIdleConnections()
	settles(t, h, base, 30*time.Second)
	after := medianRequest("after the stall")
	t.Logf("a request took %s (median) beside the stalled reader; %s before it, %s after", beside, before, after)
	// Generous: a request that waited on the stalled stream would take
	// until the stall ends, which it never does here.
	if limit := 10 * max(before, after); beside > limit {
		t.Errorf("a request beside a stalled reader took %s (median), over 10 times the %s it took without it", beside, max(before, after))
	}
}

// waitGroup waits for wg, failing the test after within.
func waitGroup(t *testing.T, wg *sync.WaitGroup, within time.Duration, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(within):
		t.Fatalf("after %s: %s", within, what)
	}
}
