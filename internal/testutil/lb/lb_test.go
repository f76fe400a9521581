package lb

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// backend is a tiny HTTP server that answers its name and counts what it
// answered.
type backend struct {
	name string
	hits atomic.Int64
	srv  *httptest.Server
}

func newBackend(t *testing.T, name string) *backend {
	b := &backend{name: name}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.hits.Add(1)
		io.WriteString(w, b.name)
	}))
	t.Cleanup(b.srv.Close)
	return b
}

func (b *backend) addr() string { return strings.TrimPrefix(b.srv.URL, "http://") }

// get asks the load balancer on a new connection, as each of many clients
// would, and returns who answered.
func get(t *testing.T, l *LB) string {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	defer c.CloseIdleConnections()
	resp, err := c.Get("http://" + l.Addr() + "/")
	if err != nil {
		t.Fatalf("GET through the load balancer: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET through the load balancer: %s %q %v", resp.Status, body, err)
	}
	return string(body)
}

// Round robin with no stickiness: each new connection goes to the next
// backend. A disabled backend gets nothing until enabled again, and a
// killed one is passed over.
func TestRoundRobinDisableEnable(t *testing.T) {
	a, b := newBackend(t, "a"), newBackend(t, "b")
	l := Start(t, []string{a.addr(), b.addr()})

	var seen []string
	for range 6 {
		seen = append(seen, get(t, l))
	}
	for i := 1; i < len(seen); i++ {
		if seen[i] == seen[i-1] {
			t.Fatalf("answers %q: the same backend twice in a row, want each in turn", seen)
		}
	}
	if a.hits.Load() != 3 || b.hits.Load() != 3 {
		t.Errorf("a answered %d, b %d of 6, want 3 each", a.hits.Load(), b.hits.Load())
	}

	l.Disable(0)
	before := a.hits.Load()
	for range 4 {
		if got := get(t, l); got != "b" {
			t.Errorf("with a disabled, %q answered", got)
		}
	}
	if n := a.hits.Load() - before; n != 0 {
		t.Errorf("disabled, a still got %d requests", n)
	}

	l.Enable(0)
	seen = seen[:0]
	for range 4 {
		seen = append(seen, get(t, l))
	}
	if strings.Count(strings.Join(seen, ""), "a") != 2 {
		t.Errorf("after Enable, answers %q, want a and b in turn", seen)
	}

	// Killed: its port refuses, and HAProxy tries the next backend.
	b.srv.Close()
	for range 4 {
		if got := get(t, l); got != "a" {
			t.Errorf("with b killed, %q answered", got)
		}
	}
}

// A disabled backend's open connection goes on: Disable stops new ones
// only, as a load balancer does with a pod that stopped being ready.
func TestDisableKeepsOpenConnections(t *testing.T) {
	a := newBackend(t, "a")
	l := Start(t, []string{a.addr()})
	c := &http.Client{Transport: &http.Transport{}}
	defer c.CloseIdleConnections()
	do := func() (string, error) {
		resp, err := c.Get("http://" + l.Addr() + "/")
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return string(body), err
	}
	if got, err := do(); err != nil || got != "a" {
		t.Fatalf("first GET: %q %v", got, err)
	}
	l.Disable(0)
	// The same kept-alive connection still reaches a.
	if got, err := do(); err != nil || got != "a" {
		t.Errorf("GET on the open connection after Disable: %q %v", got, err)
	}
	if a.hits.Load() != 2 {
		t.Errorf("a answered %d, want 2", a.hits.Load())
	}
}

func TestFindHonoursTheVariable(t *testing.T) {
	t.Setenv(envPath, "/nonexistent/haproxy")
	if _, err := Find(); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "apt-get install haproxy") {
		t.Errorf("Find with $%s pointing nowhere: %v, want ErrNotFound saying how to install it", envPath, err)
	}
}

// Without HAProxy, Start skips the test, or fails it when $CI is set.
func TestStartWithoutHAProxy(t *testing.T) {
	t.Setenv(envPath, "/nonexistent/haproxy")
	for _, tc := range []struct {
		ci       string
		wantSkip bool
	}{{"", true}, {"false", true}, {"true", false}} {
		t.Setenv("CI", tc.ci)
		ft := &stopT{TB: t}
		func() {
			defer func() {
				if r := recover(); r != nil && r != ft {
					panic(r)
				}
			}()
			Start(ft, []string{"127.0.0.1:1"})
		}()
		if ft.skipped != tc.wantSkip || ft.failed == tc.wantSkip {
			t.Errorf("CI=%q: skipped %v, failed %v; want skipped %v", tc.ci, ft.skipped, ft.failed, tc.wantSkip)
		}
		if msg := ft.msg; !strings.Contains(msg, "apt-get install haproxy") {
			t.Errorf("CI=%q: %q doesn't say how to install HAProxy", tc.ci, msg)
		}
	}
}

// stopT records a Skipf or Fatalf, then stops Start by panicking with
// itself, as the real ones stop the test's goroutine.
type stopT struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (s *stopT) Skipf(format string, args ...any) {
	s.skipped, s.msg = true, fmt.Sprintf(format, args...)
	panic(s)
}

func (s *stopT) Fatalf(format string, args ...any) {
	s.failed, s.msg = true, fmt.Sprintf(format, args...)
	panic(s)
}
