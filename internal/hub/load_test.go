package hub

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tetherhq/tether/internal/agent"
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
			testutil.ToFloat64(h.metrics.streamsOpened) == testutil.ToFloat64(h.metrics.streamsClosed) &&
			now.goroutines <= base.goroutines+leakSlack && now.fds <= base.fds+leakSlack
	})
	t.Logf("settled in %s: goroutines %d (baseline %d), fds %d (baseline %d), streams opened %v = closed %v",
		time.Since(start).Round(time.Millisecond), now.goroutines, base.goroutines, now.fds, base.fds,
		testutil.ToFloat64(h.metrics.streamsOpened), testutil.ToFloat64(h.metrics.streamsClosed))
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
	fc := newFakeCluster(t)
	// Heartbeats every 5 s, not 1: a thousand TLS handshakes with -race on
	// a busy two-core machine can hold up a pong for seconds.
	h, _ := proxyHub(t, fc, "", quietHub, func(c *Config) { c.Heartbeat = 5 * time.Second })
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the hub's log:\n%s\nthe agent's log:\n%s", h.logs, h.agents["open"].logs)
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

func TestSlowReaderDoesNotLeak(t *testing.T) {
	fc := newFakeCluster(t)
	h, _ := proxyHub(t, fc, "", quietHub)
	tr := &http.Transport{DisableKeepAlives: true}
	client := &http.Client{Transport: tr}
	base := measure()

	// A reader that reads a little of a endless answer and then stops.
	resp, err := getAs(context.Background(), client, h.url+"/clusters/open/big")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, 64<<10)); err != nil {
		t.Fatal(err)
	}
	// While it stalls, with every buffer on its path full, others get
	// through, and quickly compared with the stall.
	time.Sleep(500 * time.Millisecond)
	for i := range 20 {
		start := time.Now()
		if status, _, _ := call(t, "GET", h.url+"/clusters/open/api", aliceToken, nil); status != http.StatusOK {
			t.Fatalf("request %d beside a stalled reader: %d", i, status)
		}
		if d := time.Since(start); i == 19 {
			t.Logf("a request beside the stalled reader took %s", d.Round(time.Microsecond))
		}
	}
	resp.Body.Close()
	tr.CloseIdleConnections()
	settles(t, h, base, 30*time.Second)
}

func TestAgentDyingWithDialsPending(t *testing.T) {
	fc := newFakeCluster(t)
	h := startHub(t, Config{Agents: testAgents("eu-1"), Heartbeat: 200 * time.Millisecond, ProbeInterval: time.Hour, IdleTimeout: 200 * time.Millisecond})
	p := hubProxy(t, h)
	dialing := make(chan struct{}, 100)
	a := startAgent(t, h.url, "eu-1", fc, viaProxy(t, p), func(c *agent.Config) {
		// An API server that never answers a dial.
		c.DialAPIServer = func(ctx context.Context, _, _ string) (net.Conn, error) {
			dialing <- struct{}{}
			<-ctx.Done()
			return nil, ctx.Err()
		}
	})
	eventually(t, 5*time.Second, "connected", a.Connected)
	c := h.connected("eu-1")
	base := measure()

	const n = 50
	errs := make(chan error, n)
	for range n {
		go func() {
			st, err := c.dial(context.Background())
			if err == nil {
				st.Close()
				err = errors.New("a dial succeeded")
			}
			errs <- err
		}()
	}
	for range n {
		select {
		case <-dialing:
		case <-time.After(10 * time.Second):
			t.Fatal("the agent did not start every dial")
		}
	}
	// The agent dies: its connection vanishes, and it never comes back.
	deadAt := time.Now()
	p.Reset()
	a.cancel()
	for range n {
		select {
		case err := <-errs:
			if err == nil {
				t.Error("a pending dial succeeded")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a pending dial hangs after its agent died")
		}
	}
	t.Logf("%d pending dials failed within %s of the agent dying", n, time.Since(deadAt).Round(time.Millisecond))
	a.wait(t, 10*time.Second)
	eventually(t, 10*time.Second, "the hub drops the dead agent", func() bool { return h.connected("eu-1") == nil })
	// The agent is gone, so its goroutines are too: back below the baseline
	// taken while it was connected.
	settles(t, h, base, 30*time.Second)
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
