package kubeproxy

import (
	"context"
	"sync"
)

// inflight counts requests in progress and lets a caller wait, with a
// deadline, for none to be left. Unlike a WaitGroup it needs no goroutine
// to wait with a context, and Add may follow a Wait.
type inflight struct {
	mu   sync.Mutex    // guards the following
	n    int           // requests in progress
	idle chan struct{} // closed while n == 0
}

func newInflight() *inflight {
	idle := make(chan struct{})
	close(idle)
	return &inflight{idle: idle}
}

func (f *inflight) add() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == 0 {
		f.idle = make(chan struct{})
	}
	f.n++
}

func (f *inflight) done() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n--
	if f.n == 0 {
		close(f.idle)
	}
}

// wait returns nil once no request is in progress, or ctx's error.
func (f *inflight) wait(ctx context.Context) error {
	f.mu.Lock()
	idle := f.idle
	f.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
