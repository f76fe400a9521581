package server

import (
	"testing"
	"time"
)

func TestReadRecordings(t *testing.T) {
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	r, err := readRecordings(env())
	if err != nil || r.Dir != "" || r.MaxBytes != DefaultRecordingMaxBytes || r.Retention != DefaultRecordingRetention {
		t.Errorf("defaults: %+v %v", r, err)
	}
	r, err = readRecordings(env("TETHER_RECORDINGS_DIR", "/rec", "TETHER_RECORDINGS_ALL", "true", "TETHER_RECORDINGS_MAX_BYTES", "2Mi",
		"TETHER_RECORDINGS_RETENTION", "7d", "TETHER_RECORDINGS_VIEWERS", " auditors, sre ,"))
	if err != nil || r.Dir != "/rec" || !r.All || r.MaxBytes != 2<<20 || r.Retention != 7*24*time.Hour || len(r.Viewers) != 2 || r.Viewers[1] != "sre" {
		t.Errorf("set: %+v %v", r, err)
	}
	if r, _ := readRecordings(env("TETHER_RECORDINGS_RETENTION", "72h")); r.Retention != 72*time.Hour {
		t.Errorf("72h: %v", r.Retention)
	}
	for _, bad := range [][2]string{
		{"TETHER_RECORDINGS_ALL", "yes"},
		{"TETHER_RECORDINGS_MAX_BYTES", "10Ki"},
		{"TETHER_RECORDINGS_RETENTION", "10m"},
		{"TETHER_RECORDINGS_RETENTION", "xd"},
		{"TETHER_RECORDINGS_RETENTION", "99999d"},
	} {
		if _, err := readRecordings(env(bad[0], bad[1])); err == nil {
			t.Errorf("%s=%q was taken", bad[0], bad[1])
		}
	}
}
