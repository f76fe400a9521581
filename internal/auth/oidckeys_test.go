package auth

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestIssuerKeysWaitEndsWithTheRequest: a request whose token starts a
// fetch of the issuer's keys stops waiting when it ends, though the issuer
// is slow to answer; the fetch goes on, and a later request gets its keys.
func TestIssuerKeysWaitEndsWithTheRequest(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
		w.Write([]byte(`{"keys":[{"kty":"oct","k":"c2VjcmV0","kid":"a"}]}`))
	}))
	defer srv.Close()
	// Should the wait not end with the request, the issuer answers after
	// 10 s, and the test fails instead of hanging.
	slow := time.AfterFunc(10*time.Second, func() { close(release) })
	k := &issuerKeys{url: srv.URL, client: srv.Client(), life: t.Context(), now: time.Now, spawn: spawnForTest(t)}

	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := k.refresh(ctx, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("the request that started the fetch: %v after %v; want it to give up when it ends", err, time.Since(start).Round(time.Millisecond))
	}
	if slow.Stop() {
		close(release)
	}
	keys, err := k.refresh(t.Context(), 0) // waits for the fetch in flight
	if err != nil || len(keys) != 1 || keys[0].KeyID != "a" {
		t.Errorf("the next request: %v, %v; want the issuer's key", keys, err)
	}
}

// TestIssuerKeysFetchedSinceTheyWereRead: a request that read the keys
// before a fetch ended, and found none that verifies its token, takes that
// fetch's keys; it is not refused for the cooldown the fetch began.
func TestIssuerKeysFetchedSinceTheyWereRead(t *testing.T) {
	var fetches atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		w.Write([]byte(`{"keys":[{"kty":"oct","k":"c2VjcmV0","kid":"a"}]}`))
	}))
	defer srv.Close()
	k := &issuerKeys{url: srv.URL, client: srv.Client(), life: t.Context(), now: time.Now, spawn: spawnForTest(t)}

	// Two requests read the keys (none yet); the first fetches them.
	if _, err := k.refresh(t.Context(), 0); err != nil {
		t.Fatal(err)
	}
	keys, err := k.refresh(t.Context(), 0)
	if err != nil || len(keys) != 1 || keys[0].KeyID != "a" {
		t.Errorf("the second request: %v, %v; want the key the first one fetched", keys, err)
	}
	if n := fetches.Load(); n != 1 {
		t.Errorf("%d fetches; want 1", n)
	}
	// A request that read the fetched keys and still found none is refused
	// within the cooldown.
	if _, err := k.refresh(t.Context(), 1); err == nil || !strings.Contains(err.Error(), "fetches them again") {
		t.Errorf("a request that saw the last fetch: %v; want the cooldown's refusal", err)
	}
}

// spawnForTest runs each fetch in a goroutine the test waits for as it ends.
func spawnForTest(t *testing.T) func(func()) bool {
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	return func(f func()) bool {
		wg.Go(f)
		return true
	}
}
