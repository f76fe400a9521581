package tunnel

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestVerifyConfig: each field's rule, and the error names the field and
// the value.
func TestVerifyConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // in the error; "" for none
	}{
		{"zero", Config{}, ""},
		{"defaults", DefaultConfig(), ""},
		{"smallest window", Config{StreamWindow: 256 << 10}, ""},
		{"window too small", Config{StreamWindow: 1024}, "StreamWindow is 1024; it must be at least 262144"},
		{"max window below window: no growth", Config{StreamWindow: 4 << 20, MaxStreamWindow: 1 << 20}, ""},
		{"no growth", Config{MaxWindowGrowth: -1}, ""},
		{"negative write timeout", Config{WriteTimeout: -time.Second}, "WriteTimeout is -1s; it must be positive"},
		{"negative close timeout", Config{StreamCloseTimeout: -time.Second}, "StreamCloseTimeout is -1s; it must be positive"},
		{"negative backlog", Config{AcceptBacklog: -1}, "AcceptBacklog is -1; it must be positive"},
		{"negative peer streams", Config{MaxPeerStreams: -2}, "MaxPeerStreams is -2; it must be positive, or 0 for no bound"},
		{"peer streams bounded", Config{MaxPeerStreams: 4}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := VerifyConfig(tc.cfg)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("VerifyConfig(%+v) = %v, want nil", tc.cfg, err)
			case tc.want != "" && err == nil:
				t.Errorf("VerifyConfig(%+v) = nil, want an error with %q", tc.cfg, tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Errorf("VerifyConfig(%+v) = %q, want it to say %q", tc.cfg, err, tc.want)
			}
		})
	}
}

// TestOneFieldKeepsTheOthersDefaults: a session given a config with one
// field set runs with that field and every other field's default.
func TestOneFieldKeepsTheOthersDefaults(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		set  func(*Config)
	}{
		{"StreamWindow", Config{StreamWindow: 256 << 10}, func(c *Config) { c.StreamWindow = 256 << 10 }},
		{"MaxStreamWindow", Config{MaxStreamWindow: 2 << 20}, func(c *Config) { c.MaxStreamWindow = 2 << 20 }},
		{"MaxWindowGrowth", Config{MaxWindowGrowth: -1}, func(c *Config) { c.MaxWindowGrowth = -1 }},
		{"WriteTimeout", Config{WriteTimeout: time.Second}, func(c *Config) { c.WriteTimeout = time.Second }},
		{"StreamCloseTimeout", Config{StreamCloseTimeout: time.Second}, func(c *Config) { c.StreamCloseTimeout = time.Second }},
		{"AcceptBacklog", Config{AcceptBacklog: 2}, func(c *Config) { c.AcceptBacklog = 2 }},
		{"MaxPeerStreams", Config{MaxPeerStreams: 4}, func(c *Config) { c.MaxPeerStreams = 4 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := rawPeerWith(t, tc.cfg)
			want := DefaultConfig()
			tc.set(&want)
			if s.cfg != want {
				t.Errorf("a session given %+v runs with %+v, want %+v", tc.cfg, s.cfg, want)
			}
		})
	}
}

// TestDialAndAcceptVerify: Dial refuses a bad config before it connects,
// and Accept before it upgrades, answering 500.
func TestDialAndAcceptVerify(t *testing.T) {
	bad := Config{StreamWindow: 1}
	upgraded := make(chan error, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, err := Accept(w, r, bad)
		if s != nil {
			s.Close()
		}
		upgraded <- err
	}))
	defer srv.Close()
	url := "ws" + strings.TrimPrefix(srv.URL, "http")

	if s, _, err := Dial(context.Background(), url, DialOptions{}, bad); err == nil || !strings.Contains(err.Error(), "StreamWindow") {
		if s != nil {
			s.Close()
		}
		t.Fatalf("Dial with StreamWindow 1: %v, want an error naming StreamWindow", err)
	}
	select {
	case err := <-upgraded:
		t.Fatalf("Dial reached the server with a bad config (Accept: %v)", err)
	default:
	}

	s, resp, err := Dial(context.Background(), url, DialOptions{}, DefaultConfig())
	if s != nil {
		s.Close()
	}
	if err == nil || resp == nil || resp.StatusCode != http.StatusInternalServerError {
		t.Errorf("Dial to an Accept with StreamWindow 1: %v, %v; want a 500", resp, err)
	}
	if err := <-upgraded; err == nil || !strings.Contains(err.Error(), "StreamWindow") {
		t.Errorf("Accept with StreamWindow 1: %v, want an error naming StreamWindow", err)
	}
}
