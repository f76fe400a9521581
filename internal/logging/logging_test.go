package logging

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

func TestTextHandler(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(NewTextHandler(&buf, slog.LevelInfo)).With("cluster", "eu-1")
	log.Debug("hidden")
	log.WithGroup("req").Info(`The agent of "eu-1" connected (Tether v1)`, "remote", "10.0.0.1:5", "why", "two words", "n", 3)
	got := buf.String()
	want := ` INFO  The agent of "eu-1" connected (Tether v1) cluster="eu-1" req.remote=10.0.0.1:5 req.why="two words" req.n=3` + "\n"
	if !strings.HasSuffix(got, want) || strings.Count(got, "\n") != 1 {
		t.Fatalf("got %q, want a line ending %q", got, want)
	}
}

func TestNewRejectsUnknownFormat(t *testing.T) {
	if _, err := New("yaml", nil, nil); err == nil || !strings.Contains(err.Error(), `not "yaml"`) {
		t.Fatalf("New(yaml) = %v", err)
	}
}
