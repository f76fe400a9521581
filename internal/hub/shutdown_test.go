package hub

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
	"github.com/tetherhq/tether/internal/testutil/syncbuf"
)

// TestShutdownLetsOpenRequestsFinish: SPEC section 2's shutdown, through
// Serve as `tether hub` runs it. A request open when the hub is told to
// stop runs to its end within the grace period; meanwhile the hub takes no
// new connection and keeps its agent; once the request is done, it sends
// the agent away to wait its share of the spread, and stops.
func TestShutdownLetsOpenRequestsFinish(t *testing.T) {
	fc := newFakeCluster(t)
	annToken := strings.Repeat("a", 32)
	opts := optionsOn(t, map[string]string{
		"TETHER_PUBLIC_URL":               "http://hub.example.com",
		"TETHER_METRICS_ADDR":             "0",
		"TETHER_USERS":                    "- {name: ann, token: " + annToken + "}\n",
		"TETHER_FLEET_AGENTS":             "- {name: eu-1, token: " + testToken + "}\n",
		"TETHER_SHUTDOWN_GRACE_SECONDS":   "60",
		"TETHER_RECONNECT_SPREAD_SECONDS": "10",
	})
	opts.AuditFile = filepath.Join(t.TempDir(), "audit")
	addr := opts.Listener.Addr().String()
	logs := &syncbuf.Buffer{}
	log, _ := logging.New("text", logs, slog.LevelInfo)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, opts, log, nil) }()

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
	if !strings.Contains(logs.String(), "Shutting down: open requests have up to 1m0s to finish") {
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

	fc.release() // the API server sends the rest, and the answer ends
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
	if !strings.Contains(a.logs.String(), "the hub is shutting down") {
		t.Errorf("the agent's log doesn't say why it left:\n%s", a.logs)
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
