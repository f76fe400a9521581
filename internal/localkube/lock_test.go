//go:build unix

package localkube

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"testing"
	"time"
)

func TestLockWaitsForTheHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	unlock, err := lock(t.Context(), slog.New(slog.DiscardHandler), path)
	if err != nil {
		t.Fatal(err)
	}
	// Another open file description of the same file: flock treats it as
	// another process would be treated.
	ctx, cancel := context.WithTimeout(t.Context(), 700*time.Millisecond)
	defer cancel()
	if _, err := lock(ctx, slog.New(slog.DiscardHandler), path); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second lock while held: %v, want a deadline error", err)
	}
	unlock()
	unlock2, err := lock(t.Context(), slog.New(slog.DiscardHandler), path)
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	unlock2()
}
