package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/yamux"
)

// memSample is what the hub process holds at one moment.
type memSample struct {
	heap, stack, rss float64 // bytes
	goroutines       float64
}

func sampleMem() (memSample, error) {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	rss, err := readRSS()
	if err != nil {
		return memSample{}, err
	}
	return memSample{
		heap:       float64(ms.HeapAlloc),
		stack:      float64(ms.StackInuse),
		rss:        rss,
		goroutines: float64(runtime.NumGoroutine()),
	}, nil
}

func readRSS() (float64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("read rss: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err != nil {
				return 0, fmt.Errorf("parse VmRSS %q: %w", line, err)
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("no VmRSS line in /proc/self/status")
}

// memPerConn is the hub-side cost of one idle agent, printed by the
// memserver process as one JSON line.
type memPerConn struct {
	Heap       float64 `json:"heap"`
	Stack      float64 `json:"stack"`
	RSS        float64 `json:"rss"`
	Goroutines float64 `json:"goroutines"`
}

// runMemServer is the hub: it accepts n WebSocket connections from a child
// process, runs a yamux server session (keepalive off) on each, and prints
// what the process grew by, divided by n. The clients live in the child so
// that their memory is not counted.
func runMemServer(tr transport, lib string, n int) error {
	before, err := sampleMem()
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	cfg := yamuxConfig(0)
	var active atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		nc, err := tr.accept(w, r)
		if err != nil {
			return
		}
		s, err := yamux.Server(nc, cfg)
		if err != nil {
			nc.Close()
			return
		}
		active.Add(1)
		defer active.Add(-1)
		// Echo the agent's one warm-up stream, then sit idle.
		if st, err := s.AcceptStream(); err == nil {
			_, _ = io.Copy(st, st)
			st.Close()
		}
		<-s.CloseChan()
	})}
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(ln) })
	defer func() {
		srv.Close()
		wg.Wait()
	}()

	child := exec.Command(os.Args[0], "-role=memclients", "-lib="+lib,
		"-n="+strconv.Itoa(n), "-addr="+ln.Addr().String())
	child.Stderr = os.Stderr
	stdin, err := child.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := child.StdoutPipe()
	if err != nil {
		return err
	}
	if err := child.Start(); err != nil {
		return fmt.Errorf("start clients: %w", err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		stdin.Close()
		child.Wait()
		return fmt.Errorf("clients did not get ready: %q %v", line, err)
	}
	for active.Load() < int64(n) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(time.Second)
	after, err := sampleMem()
	if err != nil {
		return err
	}

	// Ending the child drops every connection; each handler then returns.
	stdin.Close()
	if err := child.Wait(); err != nil {
		return fmt.Errorf("clients: %w", err)
	}
	for deadline := time.Now().Add(30 * time.Second); active.Load() > 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}

	fn := float64(n)
	return json.NewEncoder(os.Stdout).Encode(memPerConn{
		Heap:       (after.heap - before.heap) / fn,
		Stack:      (after.stack - before.stack) / fn,
		RSS:        (after.rss - before.rss) / fn,
		Goroutines: (after.goroutines - before.goroutines) / fn,
	})
}

// runMemClients is the agents' side: n connections, each with a yamux client
// session that has sent one ping and had warmBytes echoed on one stream (so
// the hub's read and write paths have been used as they would be after real
// traffic), held open until stdin closes.
func runMemClients(tr transport, n int, addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := yamuxConfig(0)
	sessions := make([]*yamux.Session, n)
	errs := make(chan error, n)
	next := make(chan int)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for i := range next {
				nc, err := tr.dial(ctx, "ws://"+addr+"/tunnel")
				if err != nil {
					errs <- err
					continue
				}
				s, err := yamux.Client(nc, cfg)
				if err != nil {
					nc.Close()
					errs <- err
					continue
				}
				if _, err := s.Ping(); err != nil {
					errs <- fmt.Errorf("ping: %w", err)
				}
				if err := warm(s); err != nil {
					errs <- err
				}
				sessions[i] = s
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}

const warmBytes = 256 << 10

// warm sends warmBytes over a new stream and reads the echo back to EOF.
func warm(s *yamux.Session) error {
	st, err := s.OpenStream()
	if err != nil {
		return fmt.Errorf("open warm-up stream: %w", err)
	}
	defer st.Close()
	var wg sync.WaitGroup
	var werr error
	wg.Go(func() {
		_, werr = st.Write(make([]byte, warmBytes))
		st.Close() // half-close: the hub's io.Copy sees EOF
	})
	got, rerr := io.Copy(io.Discard, st)
	wg.Wait()
	if werr != nil || rerr != nil || got != warmBytes {
		return fmt.Errorf("warm-up echo: wrote err %v, read %d bytes err %v", werr, got, rerr)
	}
	return nil
}

// measureMemory runs one memserver child for lib and parses its result.
func measureMemory(lib string, n int) (memPerConn, error) {
	cmd := exec.Command(os.Args[0], "-role=memserver", "-lib="+lib, "-n="+strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return memPerConn{}, fmt.Errorf("memserver %s: %w", lib, err)
	}
	var m memPerConn
	if err := json.Unmarshal(out, &m); err != nil {
		return memPerConn{}, fmt.Errorf("memserver %s printed %q: %w", lib, out, err)
	}
	return m, nil
}
