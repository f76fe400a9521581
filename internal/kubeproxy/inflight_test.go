package kubeproxy

import (
	"context"
	"testing"
	"time"
)

func TestInflight(t *testing.T) {
	f := newInflight()
	if err := f.wait(context.Background()); err != nil {
		t.Fatalf("idle: %v", err)
	}
	f.add()
	f.add()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := f.wait(ctx); err != context.DeadlineExceeded {
		t.Fatalf("with requests in progress: %v, want the deadline", err)
	}
	waited := make(chan error, 1)
	go func() { waited <- f.wait(context.Background()) }()
	f.done()
	select {
	case <-waited:
		t.Fatal("wait returned with a request still in progress")
	case <-time.After(20 * time.Millisecond):
	}
	f.done()
	if err := <-waited; err != nil {
		t.Fatalf("after the last request: %v", err)
	}
	f.add() // an add after a wait is fine
	f.done()
}
