// Package lb starts a real HAProxy in front of servers for tests: the load
// balancer the hub replicas' end-to-end tests put between clients, agents
// and the hubs, as a Service or a cloud load balancer would be. It balances
// TCP connections round robin with no stickiness, so TLS passes through to
// the backends and WebSockets and HTTP/2 work unchanged, and each new
// connection may land on any backend.
//
// HAProxy checks no backend's health: a connection refused by a dead
// backend is retried (3 times, each on the next backend, after a connect
// timeout of 500 ms at most), so a test may kill a backend and the next
// connections go to the others. Disable and Enable take a backend out and
// put it back through HAProxy's runtime API, as a rolling update does.
package lb

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"text/template"
	"time"

	"github.com/tetherhq/tether/internal/testutil/syncbuf"
)

// ErrNotFound is what Find wraps when no HAProxy is installed.
var ErrNotFound = errors.New("no HAProxy found")

const (
	// envPath names an haproxy binary to use instead of searching for one.
	envPath = "TETHER_HAPROXY"
	// installHint is what a person without HAProxy reads.
	installHint = "install it with `apt-get install haproxy` (or `make haproxy`), or set $" + envPath + " to its path"
	// backendName is the one backend's name in the configuration and
	// the runtime API.
	backendName = "servers"
	// startTimeout bounds the wait for HAProxy's runtime API to answer;
	// HAProxy starts in milliseconds.
	startTimeout = 30 * time.Second
	// stopTimeout bounds the wait for HAProxy to exit once told to.
	stopTimeout = 10 * time.Second
	// commandTimeout bounds one runtime API command.
	commandTimeout = 10 * time.Second
)

// configText is HAProxy's configuration. The frontend binds the listening
// socket Start made and passes to HAProxy as file descriptor 3, so the
// address is known and taken before HAProxy runs, with no race for a free
// port. Long timeouts on both sides: agents' WebSockets and people's
// watches and exec sessions last for the whole test.
const configText = `global
	stats socket {{.Socket}} mode 600 level admin
	# No maxconn: HAProxy sizes it to the descriptors it may open
	# (ulimit -n), two a connection.

defaults
	mode tcp
	timeout connect 500ms
	timeout client 1h
	timeout server 1h
	# A connection refused (a backend killed) is tried again, each time on
	# the next backend: round robin with no health checks.
	retries 3
	option redispatch 1

frontend front
	bind fd@3
	default_backend ` + backendName + `

backend ` + backendName + `
	balance roundrobin
{{- range $i, $b := .Backends}}
	server {{serverName $i}} {{$b}}
{{- end}}
`

// LB is a running HAProxy.
type LB struct {
	t        testing.TB
	addr     string
	socket   string // the runtime API's unix socket
	backends []string
	cmd      *exec.Cmd
	exited   chan struct{} // closed when cmd has been waited for
	waitErr  error         // cmd.Wait's result, set before exited closes
	out      syncbuf.Buffer
}

// Find returns the path of the haproxy to run: $TETHER_HAPROXY if set,
// else /usr/sbin/haproxy (Debian's, which a user's $PATH may lack), else
// haproxy on $PATH. Its error wraps ErrNotFound and says how to install it.
func Find() (string, error) {
	if p := os.Getenv(envPath); p != "" {
		if err := executable(p); err != nil {
			return "", fmt.Errorf("$%s=%q: %w: %v; %s", envPath, p, ErrNotFound, err, installHint)
		}
		return p, nil
	}
	if executable("/usr/sbin/haproxy") == nil {
		return "/usr/sbin/haproxy", nil
	}
	if p, err := exec.LookPath("haproxy"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%w (looked for /usr/sbin/haproxy and haproxy on $PATH); %s", ErrNotFound, installHint)
}

func executable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", path)
	}
	return nil
}

// Start runs HAProxy on a free port of 127.0.0.1 in front of backends
// (host:port each, in the order Disable and Enable number them), and stops
// it when t ends, closing every connection through it. Its configuration
// is written to t.TempDir().
//
// Without an HAProxy, Start skips t, or fails it when $CI is true: a CI
// machine without one is a broken CI machine, and a skipped test there
// would pass unseen.
func Start(t testing.TB, backends []string) *LB {
	t.Helper()
	if len(backends) == 0 {
		t.Fatal("lb: no backends")
	}
	path, err := Find()
	if err != nil {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatalf("lb: %v", err)
		}
		t.Skipf("lb: %v", err)
	}

	// Unix socket paths are limited to about 100 bytes, which a deep
	// t.TempDir() can pass: the socket goes in a short directory of its own.
	sockDir, err := os.MkdirTemp("", "lb")
	if err != nil {
		t.Fatalf("lb: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	l := &LB{
		t:        t,
		socket:   filepath.Join(sockDir, "admin.sock"),
		backends: append([]string(nil), backends...),
		exited:   make(chan struct{}),
	}

	cfgPath := filepath.Join(t.TempDir(), "haproxy.cfg")
	var cfg strings.Builder
	config := template.Must(template.New("haproxy.cfg").Funcs(template.FuncMap{"serverName": serverName}).Parse(configText))
	err = config.Execute(&cfg, struct {
		Socket   string
		Backends []string
	}{l.socket, l.backends})
	if err != nil {
		t.Fatalf("lb: configuration: %v", err)
	}
	if err := os.WriteFile(cfgPath, []byte(cfg.String()), 0o600); err != nil {
		t.Fatalf("lb: %v", err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("lb: listen: %v", err)
	}
	l.addr = ln.Addr().String()
	lnFile, err := ln.(*net.TCPListener).File()
	ln.Close() // HAProxy holds its own copy of the socket
	if err != nil {
		t.Fatalf("lb: listener's file: %v", err)
	}

	// -db: one process in the foreground, which stop signals.
	l.cmd = exec.Command(path, "-db", "-f", cfgPath)
	l.cmd.ExtraFiles = []*os.File{lnFile} // fd 3
	l.cmd.Stdout = &l.out
	l.cmd.Stderr = &l.out
	err = l.cmd.Start()
	lnFile.Close()
	if err != nil {
		t.Fatalf("lb: start %s: %v", path, err)
	}
	go func() {
		l.waitErr = l.cmd.Wait()
		close(l.exited)
	}()
	t.Cleanup(l.stop)

	if err := l.waitReady(); err != nil {
		t.Fatalf("lb: %v\nHAProxy's configuration:\n%s\nits output:\n%s", err, cfg.String(), l.out.String())
	}
	return l
}

func serverName(i int) string { return "s" + strconv.Itoa(i) }

// waitReady waits until HAProxy's runtime API answers, which it does once
// the configuration is loaded and the frontend bound.
func (l *LB) waitReady() error {
	deadline := time.Now().Add(startTimeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		_, err := l.command("show info")
		if err == nil {
			return nil
		}
		select {
		case <-l.exited:
			return fmt.Errorf("HAProxy exited at start: %v", l.waitErr)
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("HAProxy's runtime API didn't answer within %v: %v", startTimeout, err)
		}
	}
}

// Addr is where clients connect: 127.0.0.1:port.
func (l *LB) Addr() string { return l.addr }

// Disable takes backend i out: HAProxy sends it no new connection, and
// those it carries go on until they end, as a load balancer does with a
// pod that stopped being ready.
func (l *LB) Disable(i int) {
	l.t.Helper()
	l.setState(i, "maint")
}

// Enable puts backend i back.
func (l *LB) Enable(i int) {
	l.t.Helper()
	l.setState(i, "ready")
}

func (l *LB) setState(i int, state string) {
	l.t.Helper()
	if i < 0 || i >= len(l.backends) {
		l.t.Fatalf("lb: no backend %d of %d", i, len(l.backends))
	}
	out, err := l.command("set server " + backendName + "/" + serverName(i) + " state " + state)
	if err != nil {
		l.t.Fatalf("lb: backend %d (%s) %s: %v", i, l.backends[i], state, err)
	}
	// The runtime API answers nothing when a command succeeds.
	if strings.TrimSpace(out) != "" {
		l.t.Fatalf("lb: backend %d (%s) %s: HAProxy said %q", i, l.backends[i], state, out)
	}
}

// command sends one command to HAProxy's runtime API and returns its
// answer; HAProxy closes the connection after it.
func (l *LB) command(cmd string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", l.socket)
	if err != nil {
		return "", fmt.Errorf("runtime API: %w", err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	if _, err := io.WriteString(conn, cmd+"\n"); err != nil {
		return "", fmt.Errorf("runtime API: %s: %w", cmd, err)
	}
	out, err := io.ReadAll(bufio.NewReader(conn))
	if err != nil {
		return string(out), fmt.Errorf("runtime API: %s: %w", cmd, err)
	}
	return string(out), nil
}

// stop ends HAProxy at once (SIGTERM: every connection through it closes)
// and waits for it; it is killed if it doesn't go.
func (l *LB) stop() {
	select {
	case <-l.exited:
		// It exited before the test ended, which nothing asks of it
		// (unless at start, which Start reported).
		if l.t.Failed() {
			return
		}
		l.t.Errorf("lb: HAProxy exited during the test: %v\nits output:\n%s", l.waitErr, l.out.String())
		return
	default:
	}
	l.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-l.exited:
	case <-time.After(stopTimeout):
		l.cmd.Process.Kill()
		<-l.exited
		l.t.Errorf("lb: HAProxy didn't stop within %v of SIGTERM; killed\nits output:\n%s", stopTimeout, l.out.String())
	}
	if l.t.Failed() {
		l.t.Logf("lb: HAProxy's output:\n%s", l.out.String())
	}
}
