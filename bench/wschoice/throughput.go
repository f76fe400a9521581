package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/yamux"
)

// variant is one way of carrying streams between hub and agent.
type variant struct {
	name     string
	tr       transport // nil: one direct TCP connection per stream
	window   uint32    // yamux MaxStreamWindowSize; 0 means the yamux default
	coalesce bool      // wrap the WebSocket net.Conn in a coalescer
}

// direction says which side writes. In Tether the agent sends most bytes
// (API responses, logs, exec output), and the agent is the WebSocket client,
// so its frames are masked.
type direction string

const (
	up   direction = "agent→hub"
	down direction = "hub→agent"
)

type tputCase struct {
	v       variant
	streams int
	dir     direction
}

func (c tputCase) key() string { return fmt.Sprintf("%s|%d|%s", c.v.name, c.streams, c.dir) }

type tputResult struct {
	mbps      float64 // 10^6 bytes per second received
	cpuPerGiB float64 // user+system CPU seconds of the whole process per GiB moved
	liveHeap  float64 // heap bytes live at the end of the measured interval
}

// yamuxConfig returns the yamux settings the benchmark uses: defaults, with
// keepalive off (it only adds noise here) and logs discarded.
func yamuxConfig(window uint32) *yamux.Config {
	cfg := yamux.DefaultConfig()
	cfg.EnableKeepAlive = false
	cfg.LogOutput = io.Discard
	if window != 0 {
		cfg.MaxStreamWindowSize = window
	}
	return cfg
}

// pairs holds the two ends of every stream of one case and how to tear
// them all down.
type pairs struct {
	hub, agent []net.Conn
	close      func() // closes everything and waits for every goroutine it started
}

func setupTCP(n int) (*pairs, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	defer ln.Close()
	p := &pairs{}
	for range n {
		a, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return nil, fmt.Errorf("dial: %w", err)
		}
		h, err := ln.Accept()
		if err != nil {
			a.Close()
			return nil, fmt.Errorf("accept: %w", err)
		}
		p.agent = append(p.agent, a)
		p.hub = append(p.hub, h)
	}
	p.close = func() {
		for i := range p.hub {
			p.hub[i].Close()
			p.agent[i].Close()
		}
	}
	return p, nil
}

// setupYamux starts an HTTP server with one WebSocket endpoint, dials it once,
// runs a yamux session on each end and has the hub open n streams.
func setupYamux(ctx context.Context, v variant, n int) (*pairs, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	cfg := yamuxConfig(v.window)
	hubSess := make(chan *yamux.Session, 1)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		nc, err := v.tr.accept(w, r)
		if err != nil {
			return
		}
		if v.coalesce {
			nc = &coalescer{Conn: nc}
		}
		s, err := yamux.Server(nc, cfg)
		if err != nil {
			nc.Close()
			return
		}
		hubSess <- s
		<-s.CloseChan() // the handler owns the conn for the session's life
	})}
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(ln) })
	var sessions []*yamux.Session
	stop := func() {
		for _, s := range sessions {
			s.Close()
		}
		srv.Close()
		wg.Wait()
	}

	nc, err := v.tr.dial(ctx, "ws://"+ln.Addr().String()+"/tunnel")
	if err != nil {
		stop()
		return nil, err
	}
	if v.coalesce {
		nc = &coalescer{Conn: nc}
	}
	as, err := yamux.Client(nc, cfg)
	if err != nil {
		nc.Close()
		stop()
		return nil, fmt.Errorf("yamux client: %w", err)
	}
	sessions = append(sessions, as)
	var hs *yamux.Session
	select {
	case hs = <-hubSess:
		sessions = append(sessions, hs)
	case <-ctx.Done():
		stop()
		return nil, ctx.Err()
	}

	p := &pairs{close: stop}
	for range n {
		h, err := hs.OpenStream()
		if err != nil {
			stop()
			return nil, fmt.Errorf("open stream: %w", err)
		}
		a, err := as.AcceptStream()
		if err != nil {
			stop()
			return nil, fmt.Errorf("accept stream: %w", err)
		}
		p.hub = append(p.hub, h)
		p.agent = append(p.agent, a)
	}
	return p, nil
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// runThroughput moves bulk bytes for warmup+dur over every stream of c and
// reports the rate over dur only.
func runThroughput(ctx context.Context, c tputCase, warmup, dur time.Duration) (tputResult, error) {
	var p *pairs
	var err error
	if c.v.tr == nil {
		p, err = setupTCP(c.streams)
	} else {
		p, err = setupYamux(ctx, c.v, c.streams)
	}
	if err != nil {
		return tputResult{}, err
	}
	writers, readers := p.agent, p.hub
	if c.dir == down {
		writers, readers = p.hub, p.agent
	}

	var received atomic.Int64
	var wg sync.WaitGroup
	for _, w := range writers {
		wg.Go(func() { sourceLoop(w) })
	}
	for _, r := range readers {
		wg.Go(func() { sinkLoop(r, &received) })
	}

	time.Sleep(warmup)
	b0, cpu0, t0 := received.Load(), cpuSeconds(), time.Now()
	time.Sleep(dur)
	b1, cpu1, t1 := received.Load(), cpuSeconds(), time.Now()
	// Live heap now is mostly data sitting in yamux receive buffers, which
	// is what a larger window costs.
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)

	p.close() // every source and sink fails and returns
	wg.Wait()

	moved := float64(b1 - b0)
	if moved <= 0 {
		return tputResult{}, errors.New("no bytes moved during the measured interval")
	}
	return tputResult{
		mbps:      moved / t1.Sub(t0).Seconds() / 1e6,
		cpuPerGiB: (cpu1 - cpu0) / (moved / (1 << 30)),
		liveHeap:  float64(ms.HeapAlloc),
	}, nil
}

// sourceLoop writes 32 KiB chunks, what io.Copy hands to Write, until the
// stream fails, which is how a case ends.
func sourceLoop(w net.Conn) {
	chunk := make([]byte, 32<<10)
	for {
		if _, err := w.Write(chunk); err != nil {
			return
		}
	}
}

func sinkLoop(r net.Conn, received *atomic.Int64) {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		received.Add(int64(n))
		if err != nil {
			return
		}
	}
}
