// Package e2e runs the real tether binary, as people run it, against a real
// kube-apiserver: the hub and the agent as separate processes, talking over
// loopback. Slower than the in-process tests of internal/server; kept to what
// only real processes and a real API server can show.
package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/localkube"
	"github.com/tetherhq/tether/internal/pki"
	"github.com/tetherhq/tether/internal/testutil/syncbuf"
	"go.uber.org/goleak"
)

var (
	tetherBin string             // the tether binary under test
	cluster   *localkube.Cluster // shared by every test: it takes seconds to start
	hubCA     *pki.CA            // signs the hubs' certificates
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

// echoAddrEnv makes the test binary a TCP echo server on the address it
// holds: the container the port-forward test runs on the test node, whose
// containers are host processes.
const echoAddrEnv = "TETHER_E2E_ECHO_ADDR"

func run(m *testing.M) int {
	if addr := os.Getenv(echoAddrEnv); addr != "" {
		return echo(addr)
	}
	dir, err := os.MkdirTemp("", "tether-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	tetherBin = filepath.Join(dir, "tether")
	build := exec.Command("go", "build", "-race", "-o", tetherBin, "github.com/tetherhq/tether/cmd/tether")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build tether:", err)
		return 1
	}
	if hubCA, err = pki.NewCA("e2e hub CA", 24*time.Hour); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cluster, err = localkube.Start(ctx, localkube.Config{Logger: log, Node: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start the test API server:", err)
		return 1
	}
	code := m.Run()
	cluster.Close()
	if code == 0 {
		// The tests' own HTTP clients keep connections, and so goroutines,
		// for reuse; none is a leak.
		http.DefaultClient.CloseIdleConnections()
		if err := goleak.Find(goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1")); err != nil {
			fmt.Fprintln(os.Stderr, "leaked goroutines:", err)
			return 1
		}
	}
	return code
}

// proc is a tether process whose output the test reads.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *syncbuf.Buffer
	done chan struct{}
	err  error // what Wait returned; read after done
}

// start runs `tether <args>` with env on top of a clean environment, and
// stops it when the test ends.
func start(t *testing.T, name string, env map[string]string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, out: &syncbuf.Buffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(tetherBin, args...)
	p.cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	for k, v := range env {
		p.cmd.Env = append(p.cmd.Env, k+"="+v)
	}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.done)
		p.err = p.cmd.Wait()
	}()
	t.Cleanup(func() {
		p.signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("output of %s:\n%s", p.name, p.out)
		}
	})
	return p
}

func (p *proc) signal(sig os.Signal) {
	select {
	case <-p.done:
	default:
		p.cmd.Process.Signal(sig)
	}
}

// waitFor waits until the output holds line.
func (p *proc) waitFor(t *testing.T, within time.Duration, line string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !strings.Contains(p.out.String(), line) {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not print %q within %s; it printed:\n%s", p.name, line, within, p.out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// exit waits for the process to end by itself and returns its exit code.
func (p *proc) exit(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(within):
		t.Fatalf("%s did not exit within %s; it printed:\n%s", p.name, within, p.out)
	}
	if p.err == nil {
		return 0
	}
	if ee, ok := p.err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	t.Fatalf("%s: %v", p.name, p.err)
	return -1
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// echo serves addr, writing back what each connection sends, until killed.
func echo(addr string) int {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			return 1
		}
		go func() {
			defer c.Close()
			io.Copy(c, c)
		}()
	}
}
