package server

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tetherhq/tether/internal/recording"
)

// RecordingOptions are the settings of session recordings (decision 039).
type RecordingOptions struct {
	// Dir holds the recordings (TETHER_RECORDINGS_DIR); "" turns them off.
	Dir string
	// All records sessions without a terminal too (TETHER_RECORDINGS_ALL).
	All bool
	// MaxBytes caps each recording (TETHER_RECORDINGS_MAX_BYTES).
	MaxBytes int
	// Retention is how long recordings are kept
	// (TETHER_RECORDINGS_RETENTION).
	Retention time.Duration
	// Viewers are the groups who see everyone's recordings
	// (TETHER_RECORDINGS_VIEWERS); others see their own.
	Viewers []string
}

// Defaults of the recordings' settings.
const (
	DefaultRecordingMaxBytes  = 64 << 20
	DefaultRecordingRetention = 30 * 24 * time.Hour
)

func readRecordings(getenv func(string) string) (RecordingOptions, error) {
	r := RecordingOptions{Dir: strings.TrimSpace(getenv("TETHER_RECORDINGS_DIR")), Retention: DefaultRecordingRetention}
	switch v := strings.TrimSpace(getenv("TETHER_RECORDINGS_ALL")); v {
	case "", "false":
	case "true":
		r.All = true
	default:
		return RecordingOptions{}, fmt.Errorf("TETHER_RECORDINGS_ALL must be true (record sessions without a terminal too, kubectl cp included) or false, not %q", v)
	}
	var err error
	if r.MaxBytes, err = byteSize(getenv, "TETHER_RECORDINGS_MAX_BYTES", DefaultRecordingMaxBytes, 1<<20); err != nil {
		return RecordingOptions{}, err
	}
	if v := strings.TrimSpace(getenv("TETHER_RECORDINGS_RETENTION")); v != "" {
		if r.Retention, err = retention(v); err != nil {
			return RecordingOptions{}, err
		}
	}
	for _, g := range strings.Split(getenv("TETHER_RECORDINGS_VIEWERS"), ",") {
		if g = strings.TrimSpace(g); g != "" {
			r.Viewers = append(r.Viewers, g)
		}
	}
	return r, nil
}

// retention reads a duration in days ("30d") or as Go writes one ("720h").
func retention(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if days, ok := strings.CutSuffix(v, "d"); ok {
		n, cerr := strconv.Atoi(days)
		d, err = time.Duration(n)*24*time.Hour, cerr
		if n > 3650 {
			err = fmt.Errorf("too long")
		}
	}
	if err != nil || d < time.Hour {
		return 0, fmt.Errorf("TETHER_RECORDINGS_RETENTION must be how long recordings are kept, at least an hour, like 30d or 72h, not %q", v)
	}
	return d, nil
}

// openRecordings starts the recordings' store, or returns nil when they
// are off.
func openRecordings(o RecordingOptions, cfg recording.Config) (*recording.Store, error) {
	if o.Dir == "" {
		return nil, nil
	}
	cfg.Dir, cfg.All, cfg.MaxBytes, cfg.Retention = o.Dir, o.All, int64(o.MaxBytes), o.Retention
	return recording.New(cfg)
}
