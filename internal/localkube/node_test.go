//go:build unix

package localkube

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// echoAddrEnv makes the test binary an echo server on the address it
// holds (see TestMain): the container the port-forward test runs, since
// its image is ignored and nothing else that serves TCP is sure to be on
// the machine.
const echoAddrEnv = "LOCALKUBE_TEST_ECHO_ADDR"

// echoServer writes back whatever each connection sends until it closes
// its side, and serves until killed.
func echoServer(addr string) int {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("echoing on", l.Addr())
	for {
		conn, err := l.Accept()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		go func() {
			defer conn.Close()
			io.Copy(conn, conn)
		}()
	}
}

// transports are the two ways kubectl streams: WebSocket, its default
// since v1.31, and SPDY, which the variables bring back.
var transports = []struct {
	name    string
	env     []string
	upgrade string // the Upgrade header the kubelet sees
}{
	{"websocket", nil, "websocket"},
	{"spdy", []string{"KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false", "KUBECTL_PORT_FORWARD_WEBSOCKETS=false"}, "spdy/3.1"},
}

const ns = "demo"

func TestNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Kubernetes API server and a kubelet (and may build them first)")
	}
	testNode(t, Config{Node: true})
}

// testNode starts a cluster with cfg and sends everything kubectl streams
// to its node's pods.
func testNode(t *testing.T, cfg Config) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	began := time.Now()
	c, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	t.Logf("cluster and node up in %s", time.Since(began).Round(100*time.Millisecond))
	k := &kube{t: t, ctx: ctx, c: c}

	k.run("get", "lease", "-n", "kube-node-lease", NodeName)
	if got := k.run("get", "node", NodeName, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status} {.status.addresses[0].address}`); got != "True 127.0.0.1" {
		t.Fatalf("node Ready and address: %q, want \"True 127.0.0.1\"", got)
	}
	k.run("create", "namespace", ns)
	work := t.TempDir()
	k.createPod("clock", map[string]any{
		"command":    []string{"sh", "-c", "echo hello; while true; do date; sleep 1; done"},
		"workingDir": work,
		"env": []map[string]any{
			{"name": "POD_NAME", "valueFrom": map[string]any{"fieldRef": map[string]any{"fieldPath": "metadata.name"}}},
			{"name": "GREETING", "value": "hi from $(POD_NAME)"},
		},
	}, "Always")
	k.waitFor("clock", "condition=Ready")

	t.Run("logs", func(t *testing.T) {
		k := k.with(t)
		if got := k.run("logs", "-n", ns, "clock"); !strings.HasPrefix(got, "hello\n") {
			t.Errorf("kubectl logs: %q, want it to start with hello", got)
		}
		// -f: new lines keep arriving, about one a second.
		fctx, stop := context.WithCancel(k.ctx)
		defer stop()
		cmd := c.KubectlCommand(fctx, c.AdminKubeconfig, "logs", "-f", "-n", ns, "clock", "--tail=0")
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		start := time.Now()
		for i := range 3 {
			if !sc.Scan() {
				t.Fatalf("kubectl logs -f ended after %d lines: %v", i, sc.Err())
			}
		}
		if took := time.Since(start); took < 1500*time.Millisecond {
			t.Errorf("kubectl logs -f --tail=0 gave 3 lines in %s: not new ones", took)
		}
		stop()
		cmd.Wait()

		// By now there are more than two dates.
		if got := k.run("logs", "-n", ns, "clock", "--tail=2"); strings.Count(got, "\n") != 2 || strings.Contains(got, "hello") {
			t.Errorf("kubectl logs --tail=2: %q, want two dates", got)
		}
		got := k.run("logs", "-n", ns, "clock", "--tail=1", "--timestamps")
		if ts, _, _ := strings.Cut(got, " "); !isTime(ts) {
			t.Errorf("kubectl logs --timestamps: %q, want an RFC 3339 time first", got)
		}
	})

	t.Run("env and working directory", func(t *testing.T) {
		k := k.with(t)
		if got := k.run("exec", "-n", ns, "clock", "--", "sh", "-c", `echo "$GREETING"; pwd`); got != "hi from clock\n"+work+"\n" {
			t.Errorf("exec echo $GREETING; pwd: %q, want %q", got, "hi from clock\n"+work+"\n")
		}
	})

	for _, tr := range transports {
		t.Run("exec over "+tr.name, func(t *testing.T) {
			k := k.with(t)
			cmd := k.kubectl(tr.env, "exec", "-i", "-n", ns, "clock", "--", "sh", "-c", "cat; echo oops >&2; exit 3")
			cmd.Stdin = strings.NewReader("ping\n")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 3 {
				t.Errorf("kubectl exec: %v, want exit status 3; stderr: %s", err, stderr.String())
			}
			if stdout.String() != "ping\n" || !strings.Contains(stderr.String(), "oops") {
				t.Errorf("kubectl exec: stdout %q, stderr %q; want ping, and oops on stderr", stdout.String(), stderr.String())
			}
			k.checkArrived("exec", tr.upgrade)
		})

		t.Run("attach over "+tr.name, func(t *testing.T) {
			k := k.with(t)
			name := "cat-" + tr.name
			k.createPod(name, map[string]any{"command": []string{"cat"}, "stdin": true, "stdinOnce": true}, "Never")
			k.waitFor(name, "condition=Ready")
			cmd := k.kubectl(tr.env, "attach", "-i", "-n", ns, name)
			cmd.Stdin = strings.NewReader("hello attach\n")
			out, err := cmd.Output()
			if err != nil || !strings.Contains(string(out), "hello attach") {
				t.Errorf("kubectl attach: %q, %v; want hello attach back", out, err)
			}
			k.checkArrived("attach", tr.upgrade)
			// Input over with stdinOnce: cat's stdin closed, so it ended.
			k.waitFor(name, "jsonpath={.status.phase}=Succeeded")
		})

		t.Run("exec with a terminal over "+tr.name, func(t *testing.T) {
			k := k.with(t)
			testTTY(k, tr.env)
			k.checkArrived("exec", tr.upgrade)
		})

		t.Run("port-forward over "+tr.name, func(t *testing.T) {
			k := k.with(t)
			k.portForward(tr.env, "echo-"+tr.name)
			k.checkArrived("portforward", tr.upgrade)
		})

		t.Run("cp over "+tr.name, func(t *testing.T) {
			k := k.with(t)
			local := t.TempDir()
			data := make([]byte, 1<<20)
			rand.Read(data)
			if err := os.WriteFile(filepath.Join(local, "up"), data, 0o644); err != nil {
				t.Fatal(err)
			}
			remote := filepath.Join(work, "cp-"+tr.name)
			k.runEnv(tr.env, "cp", filepath.Join(local, "up"), ns+"/clock:"+remote)
			if got, err := os.ReadFile(remote); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("kubectl cp to the pod: %d bytes arrived (%v), want %d", len(got), err, len(data))
			}
			k.runEnv(tr.env, "cp", ns+"/clock:"+remote, filepath.Join(local, "down"))
			if got, err := os.ReadFile(filepath.Join(local, "down")); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("kubectl cp from the pod: %d bytes came back (%v), want %d", len(got), err, len(data))
			}
		})
	}

	t.Run("exit codes and restarts", func(t *testing.T) {
		k := k.with(t)
		k.createPod("fails", map[string]any{"command": []string{"sh", "-c", "echo bye; exit 2"}}, "Never")
		k.createPod("crashes", map[string]any{"command": []string{"sh", "-c", "echo run; exit 1"}}, "Always")
		k.waitFor("fails", "jsonpath={.status.phase}=Failed")
		if got := k.run("get", "pod", "-n", ns, "fails", "-o", "jsonpath={.status.containerStatuses[0].state.terminated.exitCode}"); got != "2" {
			t.Errorf("exit code of fails: %q, want 2", got)
		}
		if got := k.run("logs", "-n", ns, "fails"); got != "bye\n" {
			t.Errorf("logs of fails: %q, want bye", got)
		}
		// -f ends with the run.
		if got := k.run("logs", "-f", "-n", ns, "fails"); got != "bye\n" {
			t.Errorf("logs -f of fails: %q, want bye", got)
		}
		k.waitFor("crashes", "jsonpath={.status.containerStatuses[0].restartCount}=2")
		if got := k.run("logs", "-n", ns, "crashes", "--previous"); got != "run\n" {
			t.Errorf("logs --previous of crashes: %q, want run", got)
		}
	})

	t.Run("a container with a terminal", func(t *testing.T) {
		k := k.with(t)
		k.createPod("tty", map[string]any{"command": []string{"sh", "-c", "test -t 0 && test -t 1 && echo on-a-terminal"}, "tty": true}, "Never")
		k.waitFor("tty", "jsonpath={.status.phase}=Succeeded")
		if got := k.run("logs", "-n", ns, "tty"); got != "on-a-terminal\r\n" {
			t.Errorf("logs of a container with a terminal: %q, want on-a-terminal and CR LF", got)
		}
	})

	t.Run("the kubelet takes only the API server", func(t *testing.T) {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(c.CAPEM)
		conn, err := tls.Dial("tcp", strings.TrimPrefix(c.Node.URL, "https://"), &tls.Config{RootCAs: pool})
		if err == nil {
			// TLS 1.3 reports a refused client certificate on the first read.
			_, err = conn.Read(make([]byte, 1))
			conn.Close()
		}
		if err == nil || errors.Is(err, io.EOF) {
			t.Errorf("a client without a certificate got through to the kubelet: %v", err)
		}
	})

	t.Run("delete", func(t *testing.T) {
		k := k.with(t)
		pid := k.containerPID("clock")
		start := time.Now()
		// The default grace period: the kubelet stops the container with
		// SIGTERM and then deletes the Pod for good.
		k.run("delete", "pod", "-n", ns, "clock", "--timeout=60s")
		t.Logf("deleted in %s", time.Since(start).Round(10*time.Millisecond))
		if err := groupGone(pid); err != nil {
			t.Errorf("the deleted pod's process group: %v", err)
		}
	})

	// Close stops the kubelet and with it the containers still running.
	pids := []int{k.containerPID("echo-websocket"), c.Node.proc.cmd.Process.Pid}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if err := groupGone(pid); err != nil {
			t.Errorf("after Close: %v", err)
		}
	}
}

// groupGone waits a little for process group pgid to be gone. Processes of
// a container's group that outlive its first one are orphans: killed, they
// stay until init reaps them, which takes a moment.
func groupGone(pgid int) error {
	var err error
	for range 50 {
		if err = syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("process group %d is still there: %v", pgid, err)
}

// kube runs kubectl for one test against the cluster, as the admin.
type kube struct {
	t   *testing.T
	ctx context.Context
	c   *Cluster
}

func (k *kube) with(t *testing.T) *kube { return &kube{t: t, ctx: k.ctx, c: k.c} }

func (k *kube) kubectl(env []string, args ...string) *exec.Cmd {
	cmd := k.c.KubectlCommand(k.ctx, k.c.AdminKubeconfig, args...)
	cmd.Env = append(cmd.Env, env...)
	return cmd
}

// run runs kubectl and returns its output, failing the test on an error.
func (k *kube) run(args ...string) string { return k.runEnv(nil, args...) }

func (k *kube) runEnv(env []string, args ...string) string {
	k.t.Helper()
	cmd := k.kubectl(env, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		k.t.Fatalf("kubectl %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// createPod creates a Pod with one container, c, bound to the node.
func (k *kube) createPod(name string, c map[string]any, restartPolicy string) {
	k.t.Helper()
	c["name"] = "main"
	c["image"] = "busybox"
	pod := map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"nodeName": NodeName, "restartPolicy": restartPolicy,
			"terminationGracePeriodSeconds": 5,
			"containers":                    []any{c},
		},
	}
	if err := k.c.Do(k.ctx, "POST", "/api/v1/namespaces/"+ns+"/pods", pod, nil); err != nil {
		k.t.Fatal(err)
	}
}

func (k *kube) waitFor(pod, condition string) {
	k.t.Helper()
	k.run("wait", "-n", ns, "pod/"+pod, "--for="+condition, "--timeout=60s")
}

// checkArrived checks that the kubelet's last streaming request of a kind
// came as the transport says: no fallback from WebSocket to SPDY, and no
// translation on the way.
func (k *kube) checkArrived(kind, upgrade string) {
	k.t.Helper()
	var last string
	k.kubeletLog(func(e map[string]any) {
		if e["msg"] == "stream" && e["kind"] == kind {
			last, _ = e["upgrade"].(string)
		}
	})
	if last != upgrade {
		k.t.Errorf("the kubelet's last %s arrived with Upgrade %q, want %q", kind, last, upgrade)
	}
}

// containerPID returns the process of the pod's latest container run.
func (k *kube) containerPID(pod string) int {
	k.t.Helper()
	pid := 0
	k.kubeletLog(func(e map[string]any) {
		if e["msg"] == "Started a container" && e["pod"] == ns+"/"+pod {
			f, _ := e["pid"].(float64)
			pid = int(f)
		}
	})
	if pid == 0 {
		k.t.Fatalf("the kubelet's log names no process for pod %s", pod)
	}
	return pid
}

// kubeletLog calls f with each JSON line of the kubelet's log (client-go
// logs other lines there too).
func (k *kube) kubeletLog(f func(map[string]any)) {
	k.t.Helper()
	b, err := os.ReadFile(k.c.Node.LogPath)
	if err != nil {
		k.t.Fatal(err)
	}
	for line := range bytes.Lines(b) {
		var e map[string]any
		if json.Unmarshal(line, &e) == nil {
			f(e)
		}
	}
}

// portForward runs an echo server as the pod name and moves 10 MiB
// through `kubectl port-forward` to it and back.
func (k *kube) portForward(env []string, name string) {
	t := k.t
	ports, err := freePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	k.createPod(name, map[string]any{
		"command": []string{exe},
		"env":     []map[string]any{{"name": echoAddrEnv, "value": "127.0.0.1:" + ports[0]}},
	}, "Never")
	k.waitFor(name, "condition=Ready")
	// Ready means started: wait for it to listen, here on this machine.
	for deadline := time.Now().Add(30 * time.Second); ; {
		conn, err := net.Dial("tcp", "127.0.0.1:"+ports[0])
		if err == nil {
			conn.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the echo server of pod %s does not listen: %v", name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	ctx, stop := context.WithCancel(k.ctx)
	defer stop()
	cmd := k.c.KubectlCommand(ctx, k.c.AdminKubeconfig, "port-forward", "-n", ns, "pod/"+name, ":"+ports[0])
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stop()
		cmd.Wait()
	}()
	// "Forwarding from 127.0.0.1:<local> -> <port>"; then it keeps
	// writing a line per connection, which the pipe holds.
	sc := bufio.NewScanner(out)
	re := regexp.MustCompile(`^Forwarding from 127\.0\.0\.1:(\d+) -> ` + ports[0])
	var local string
	for local == "" && sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			local = m[1]
		}
	}
	if local == "" {
		t.Fatalf("kubectl port-forward printed no local port: %v; %s", sc.Err(), stderr.String())
	}

	conn, err := net.Dial("tcp", "127.0.0.1:"+local)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	data := make([]byte, 10<<20)
	rand.Read(data)
	sent := make(chan error, 1)
	go func() {
		_, err := conn.Write(data)
		conn.(*net.TCPConn).CloseWrite()
		sent <- err
	}()
	conn.SetReadDeadline(time.Now().Add(2 * time.Minute))
	start := time.Now()
	got, err := io.ReadAll(conn)
	if err := <-sent; err != nil {
		t.Fatalf("sending through port-forward: %v", err)
	}
	if err != nil || sha256.Sum256(got) != sha256.Sum256(data) {
		t.Fatalf("through port-forward and back: %d bytes (%v), want the %d sent; %s", len(got), err, len(data), stderr.String())
	}
	t.Logf("10 MiB there and back in %s", time.Since(start).Round(time.Millisecond))
}

func isTime(s string) bool {
	_, err := time.Parse(time.RFC3339Nano, s)
	return err == nil
}
