package server

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/agent"
	"github.com/tetherhq/tether/internal/logging"
	"github.com/tetherhq/tether/internal/testutil/fakecluster"
	"github.com/tetherhq/tether/internal/testutil/syncbuf"
)

// annToken is ann's, the person serveForShutdown's hub knows.
var annToken = strings.Repeat("a", 32)

// serveForShutdown runs Serve as `tether hub` does, with a grace of 60 s
// and settings more (name, value pairs), until stop is called (as SIGTERM
// does) or the test ends; served gets what Serve returned.
func serveForShutdown(t *testing.T, more ...string) (addr string, logs *syncbuf.Buffer, stop func(), served chan error) {
	t.Helper()
	env := map[string]string{
		"TETHER_PUBLIC_URL":             "http://hub.example.com",
		"TETHER_METRICS_ADDR":           "0",
		"TETHER_USERS":                  "- {name: ann, token: " + annToken + "}\n",
		"TETHER_FLEET_AGENTS":           "- {name: eu-1, token: " + testToken + "}\n",
		"TETHER_SHUTDOWN_GRACE_SECONDS": "60",
	}
	for i := 0; i+1 < len(more); i += 2 {
		env[more[i]] = more[i+1]
	}
	opts := optionsOn(t, env)
	opts.AuditFile = filepath.Join(t.TempDir(), "audit")
	logs = &syncbuf.Buffer{}
	log, _ := logging.New("text", logs, slog.LevelInfo)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	served = make(chan error, 1)
	go func() { served <- Serve(ctx, opts, log, nil) }()
	return opts.Listener.Addr().String(), logs, cancel, served
}

// TestShutdownLetsOpenRequestsFinish: SPEC section 2's shutdown, through
// Serve as `tether hub` runs it. A request open when the hub is told to
// stop runs to its end within the grace period; meanwhile the hub takes no
// new connection and keeps its agent; once the request is done, it sends
// the agent away to wait its share of the spread, and stops.
func TestShutdownLetsOpenRequestsFinish(t *testing.T) {
	fc := fakecluster.New(t)
	addr, logs, stop, served := serveForShutdown(t, "TETHER_RECONNECT_SPREAD_SECONDS", "10")

	waits := make(chan time.Duration, 10)
	a := startAgent(t, "http://"+addr, "eu-1", fc, func(c *agent.Config) {
		c.Sleep = func(ctx context.Context, d time.Duration) error {
			waits <- d
			<-ctx.Done()
			return ctx.Err()
		}
	})
	eventually(t, 5*time.Second, "connected", a.Connected)

	// The open request: the API server sends one event, then waits.
	req, _ := http.NewRequest("GET", "http://"+addr+"/clusters/eu-1/stream", nil)
	req.Header.Set("Authorization", "Bearer "+annToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body := bufio.NewReader(resp.Body)
	if line, err := body.ReadString('\n'); err != nil || line != "event 1\n" {
		t.Fatalf("the first event: %q, %v", line, err)
	}

	stop() // as SIGTERM does
	eventually(t, 5*time.Second, "no new connections", func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	if !strings.Contains(logs.String(), "Shutting down: open requests may finish grace=1m0s") {
		t.Errorf("the hub didn't say it is shutting down:\n%s", logs)
	}
	select {
	case err := <-served:
		t.Fatalf("Serve returned with a request open: %v", err)
	case d := <-waits:
		t.Fatalf("the agent was sent away (to wait %s) with a request open", d)
	default:
	}
	if !a.Connected() {
		t.Error("the agent left with a request open")
	}

	fc.Release() // the API server sends the rest, and the answer ends
	if rest, err := io.ReadAll(body); err != nil || string(rest) != "event 2\n" {
		t.Errorf("the rest of the open request: %q, %v", rest, err)
	}
	select {
	case d := <-waits:
		if d < 0 || d > 10*time.Second {
			t.Errorf("the agent waits %s before it connects again; want a share of the 10 s spread", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the agent wasn't sent away after the last request:\n%s", logs)
	}
	if !strings.Contains(a.Logs.String(), "the hub is shutting down") {
		t.Errorf("the agent's log doesn't say why it left:\n%s", a.Logs)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("Serve didn't return after the last request:\n%s", logs)
	}
}

// TestShutdownEndsWatches: watches never finish, so a stopping hub ends
// each at its next event's end, cleanly, as the API server ends its own:
// at once when between events, and after the event when in one, with
// what came after it left out. Serve then stops without waiting out the
// grace.
func TestShutdownEndsWatches(t *testing.T) {
	fc := fakecluster.New(t)
	addr, logs, stop, served := serveForShutdown(t)
	a := startAgent(t, "http://"+addr, "eu-1", fc)
	eventually(t, 5*time.Second, "connected", a.Connected)

	// Without the ends, the reads below would wait out the grace: they
	// give up sooner, and say so.
	reads, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	watch := func(query string, first int) io.ReadCloser {
		t.Helper()
		req, _ := http.NewRequestWithContext(reads, "GET", "http://"+addr+"/clusters/eu-1/watch?watch=1&"+query, nil)
		req.Header.Set("Authorization", "Bearer "+annToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if got := make([]byte, first); resp.StatusCode != 200 {
			t.Fatalf("%s: %d", query, resp.StatusCode)
		} else if _, err := io.ReadFull(resp.Body, got); err != nil {
			t.Fatalf("%s: the first event: %v", query, err)
		}
		return resp.Body
	}
	const json1 = `{"type":"ADDED","n":1}` + "\n"
	idle := watch("json", len(json1))
	defer idle.Close()
	proto := watch("protobuf", 7)
	defer proto.Close()
	split := watch("json&split", len(json1))
	defer split.Close()

	stopped := time.Now()
	stop() // as SIGTERM does
	for name, body := range map[string]io.Reader{"a JSON watch": idle, "a protobuf watch": proto} {
		if rest, err := io.ReadAll(body); err != nil || len(rest) != 0 {
			t.Errorf("%s between events: %q, %v; want its clean end at once", name, rest, err)
		}
	}
	fc.Release() // the rest of event 2, and event 3
	if rest, err := io.ReadAll(split); err != nil || string(rest) != `{"type":"ADDED",`+`"n":2}`+"\n" {
		t.Errorf("a watch in an event: %q, %v; want the event's rest and a clean end", rest, err)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(30 * time.Second): // a third of the grace: it didn't wait it out
		t.Fatalf("Serve didn't return once the watches ended:\n%s", logs)
	}
	if strings.Contains(logs.String(), "Requests still open") {
		t.Errorf("the hub waited out the grace %s after it was told to stop:\n%s", time.Since(stopped), logs)
	}
}

// TestShutdownEndsEventStreams: a fleet page left open (its
// /api/events stream) must not hold a stopping hub for the whole grace
// period, as watches don't (TestShutdownEndsWatches).
func TestShutdownEndsEventStreams(t *testing.T) {
	addr, logs, stop, served := serveForShutdown(t, "TETHER_SHUTDOWN_GRACE_SECONDS", "20")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/api/events", nil)
	req.Header.Set("Authorization", "Bearer "+annToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	stop()
	go io.Copy(io.Discard, br)
	select {
	case <-served:
	case <-time.After(25 * time.Second):
		t.Fatal("Serve didn't return")
	}
	if d := time.Since(stopped); d > 10*time.Second || strings.Contains(logs.String(), "Requests still open") {
		t.Errorf("an open event stream held the stopping hub for %s (the whole grace):\n%s", d.Round(time.Second), logs)
	}
}

// TestDrainKeepsServingWhileReadyzSaysGoing: with a drain delay, a hub told
// to stop answers /readyz 503 at once, so load balancers take it out, and
// goes on serving people and agents until the delay is over; then it shuts
// down as without one.
func TestDrainKeepsServingWhileReadyzSaysGoing(t *testing.T) {
	fc := fakecluster.New(t)
	addr, logs, stop, served := serveForShutdown(t, "TETHER_DRAIN_DELAY_SECONDS", "5")
	a := startAgent(t, "http://"+addr, "eu-1", fc)
	eventually(t, 5*time.Second, "connected", a.Connected)
	status := func(path string) int {
		req, _ := http.NewRequest("GET", "http://"+addr+path, nil)
		req.Header.Set("Authorization", "Bearer "+annToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := status("/readyz"); got != http.StatusOK {
		t.Fatalf("/readyz before: %d", got)
	}
	stop()
	eventually(t, 5*time.Second, "/readyz says the hub is going", func() bool { return status("/readyz") == http.StatusServiceUnavailable })
	if got := status("/clusters/eu-1/version"); got != http.StatusOK {
		t.Errorf("a request while draining answered %d, want 200", got)
	}
	if !strings.Contains(logs.String(), "Draining: taking requests while load balancers take this hub out drainDelay=5s") {
		t.Errorf("hub log:\n%s", logs)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("Serve didn't return after the drain:\n%s", logs)
	}
}
