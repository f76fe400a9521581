package localkube

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestBuildProgress: the progress line says what is built, the time so far,
// how many packages go build -v has named and the latest, however its output
// is split across writes, and compiler messages are no packages.
func TestBuildProgress(t *testing.T) {
	for _, tc := range []struct {
		name   string
		writes []string
		want   string
	}{
		{"nothing yet", nil, `msg="Still building Kubernetes v1.36.3" elapsed=1m30s packages=0 latest=""`},
		{"whole lines", []string{"k8s.io/api/core/v1\n", "k8s.io/apiserver/pkg/server\n"},
			`elapsed=1m30s packages=2 latest=k8s.io/apiserver/pkg/server`},
		{"split lines", []string{"k8s.io/api/co", "re/v1\nk8s.io/kube", "rnetes/cmd/kube-apiserver\n"},
			`packages=2 latest=k8s.io/kubernetes/cmd/kube-apiserver`},
		{"a line not ended yet", []string{"k8s.io/api/core/v1\nk8s.io/half"},
			`packages=1 latest=k8s.io/api/core/v1`},
		{"compiler messages", []string{"k8s.io/api/core/v1\n# k8s.io/broken\n./x.go:1:1: syntax error\n\n"},
			`packages=1 latest=k8s.io/api/core/v1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Date(2026, 12, 3, 21, 0, 0, 0, time.UTC)
			var out tailBuffer
			p := newProgress("Kubernetes v1.36.3", start, &out)
			for _, w := range tc.writes {
				p.Write([]byte(w))
			}
			var logs bytes.Buffer
			p.report(slog.New(slog.NewTextHandler(&logs, nil)), start.Add(90*time.Second))
			if !strings.Contains(logs.String(), tc.want) {
				t.Errorf("progress line %q, want it to hold %q", logs.String(), tc.want)
			}
			if got := out.String(); got != strings.Join(tc.writes, "") {
				t.Errorf("the error's tail kept %q, want everything written", got)
			}
		})
	}
}
