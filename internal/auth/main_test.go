package auth

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/testutil/syncbuf"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex // guards t
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func testLogger() (*slog.Logger, *syncbuf.Buffer) {
	buf := &syncbuf.Buffer{}
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}

// newAuth builds an Authenticator that the test closes.
func newAuth(t testing.TB, cfg Config) *Authenticator {
	t.Helper()
	a, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return a
}

// request makes a request from remoteAddr with the given header lines ("Name: value").
func request(remoteAddr string, headers ...string) *http.Request {
	r := httptest.NewRequest("GET", "/clusters/a/api", nil)
	r.RemoteAddr = remoteAddr
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ":")
		r.Header.Add(k, strings.TrimSpace(v))
	}
	return r
}

func bearer(token string) *http.Request {
	return request("192.0.2.1:40000", "Authorization: Bearer "+token)
}

// waitFor polls cond until it holds or a few seconds have passed.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
