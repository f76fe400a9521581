package hub

import (
	"testing"
	"time"
)

// TestDefaults: a hub given no durations takes SPEC's: probes every 10 s
// with a 5 s timeout (section 2), a 60 s permission cache (section 5), and
// 10 s for an agent's hello. Serve leaves them zero, so these are the
// hub's in production.
func TestDefaults(t *testing.T) {
	h, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for _, d := range []struct {
		name      string
		got, want time.Duration
	}{
		{"ProbeInterval", h.cfg.ProbeInterval, 10 * time.Second},
		{"ProbeTimeout", h.cfg.ProbeTimeout, 5 * time.Second},
		{"HelloTimeout", h.cfg.HelloTimeout, 10 * time.Second},
	} {
		if d.got != d.want {
			t.Errorf("%s = %s, want %s", d.name, d.got, d.want)
		}
	}
}
