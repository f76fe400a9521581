package server

import (
	"net/http"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/testutil/fakecluster"
)

// TestAnAgentJustGoneAsksClientsToRetry: a cluster whose agent was heard
// from a moment ago (its replica went, or it is reconnecting) is answered
// 503 with Retry-After, which client-go waits out and sends the request
// again; one whose agent never came is answered 503 without it, so kubectl
// says so at once.
func TestAnAgentJustGoneAsksClientsToRetry(t *testing.T) {
	fc := fakecluster.New(t)
	h, _ := proxyHub(t, fc, "")
	if code, _, header := call(t, "GET", h.url+"/clusters/far/api", aliceToken, nil); code != http.StatusServiceUnavailable || header.Get("Retry-After") != "" {
		t.Errorf("a cluster whose agent never came: %d, Retry-After %q", code, header.Get("Retry-After"))
	}
	h.agents["open"].Stop(t)
	eventually(t, 5*time.Second, "the agent gone", func() bool { return h.connected("open") == nil })
	if code, _, header := call(t, "GET", h.url+"/clusters/open/api", aliceToken, nil); code != http.StatusServiceUnavailable || header.Get("Retry-After") != "1" {
		t.Errorf("a cluster whose agent just went: %d, Retry-After %q", code, header.Get("Retry-After"))
	}
}
