// Package agenttest runs a real agent in a test, against a hub the test
// started, so that the hub's tests meet the agent people deploy.
package agenttest

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/agent"
	"github.com/tetherhq/tether/internal/logging"
	"github.com/tetherhq/tether/internal/protocol"
	"github.com/tetherhq/tether/internal/testutil/syncbuf"
	"github.com/tetherhq/tether/internal/tunnel"
)

// Agent is an agent running in a goroutine the test owns.
type Agent struct {
	*agent.Agent
	Logs   *syncbuf.Buffer
	cancel context.CancelFunc
	done   chan struct{} // closed when Run has returned
	err    error         // what Run returned; read after done
}

// Start runs an agent named name with token against hubURL, for the API
// server at apiAddr, with the service account directory saDir. Each mod may
// change its config before it starts. The test's end stops it.
func Start(t *testing.T, hubURL, name, token, saDir, apiAddr string, mods ...func(*agent.Config)) *Agent {
	t.Helper()
	u, err := url.Parse(hubURL)
	if err != nil {
		t.Fatal(err)
	}
	ra := &Agent{Logs: &syncbuf.Buffer{}, done: make(chan struct{})}
	cfg := agent.Config{
		Options: agent.Options{
			HubURL:            u,
			Name:              name,
			Token:             token,
			TokenReread:       time.Minute,
			ServiceAccountDir: saDir,
			APIServer:         apiAddr,
		},
		Logger:           slog.New(logging.NewTextHandler(ra.Logs, nil)),
		HandshakeTimeout: 2 * time.Second,
		// Reconnect at once unless a test records the waits.
		Sleep: func(ctx context.Context, d time.Duration) error { return ctx.Err() },
	}
	for _, m := range mods {
		m(&cfg)
	}
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ra.Agent = a
	ctx, cancel := context.WithCancel(context.Background())
	ra.cancel = cancel
	go func() {
		defer close(ra.done)
		ra.err = a.Run(ctx)
	}()
	t.Cleanup(func() { ra.Stop(t) })
	return ra
}

// Wait waits for Run to return by itself, and returns its error.
func (ra *Agent) Wait(t *testing.T, within time.Duration) error {
	t.Helper()
	select {
	case <-ra.done:
		return ra.err
	case <-time.After(within):
		t.Fatalf("the agent did not exit within %s; its log:\n%s", within, ra.Logs)
		return nil
	}
}

// Stop cancels the agent and waits for Run to return.
func (ra *Agent) Stop(t *testing.T) error {
	t.Helper()
	ra.cancel()
	return ra.Wait(t, 10*time.Second)
}

// Done is closed when Run has returned; Err is what it returned, once Done
// is closed.
func (ra *Agent) Done() <-chan struct{} { return ra.done }

// Err is what Run returned; read it once Done is closed.
func (ra *Agent) Err() error { return ra.err }

// Cancel cancels Run's context, without waiting.
func (ra *Agent) Cancel() { ra.cancel() }

// Raw upgrades to hubURL's agent endpoint with name and token, and does
// nothing more: the test speaks the protocol, or misbehaves, itself. The
// test's end closes the session.
func Raw(t *testing.T, hubURL, name, token string) *tunnel.Session {
	t.Helper()
	hdr := http.Header{}
	hdr.Set("Authorization", "Bearer "+token)
	hdr.Set(protocol.AgentHeader, name)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sess, _, err := tunnel.Dial(ctx, "ws"+strings.TrimPrefix(hubURL, "http")+"/api/agent", tunnel.DialOptions{Header: hdr}, tunnel.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	return sess
}

// Via points an agent at the hub at addr, a proxy in front of it.
func Via(t *testing.T, addr string) func(*agent.Config) {
	return func(c *agent.Config) {
		u, err := url.Parse("http://" + addr)
		if err != nil {
			t.Fatal(err)
		}
		c.HubURL = u
	}
}
