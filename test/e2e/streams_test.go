package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/localkube"
	"github.com/tetherhq/tether/internal/testutil/syncbuf"
)

// transports are the two ways kubectl streams: WebSocket, its default, and
// SPDY, which these variables bring back.
var transports = []struct {
	name   string
	env    []string
	method string // the method of kubectl's request
}{
	{"websocket", nil, "GET"},
	{"spdy", []string{"KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false", "KUBECTL_PORT_FORWARD_WEBSOCKETS=false"}, "POST"},
}

// TestStreamingThroughTheHub sends everything kubectl streams (logs -f,
// exec, attach, port-forward, cp) through the real hub and agent, the API
// server and the test node's kubelet.
func TestStreamingThroughTheHub(t *testing.T) {
	ns := unique("streams")
	admin(t, "create", "namespace", ns)
	setUpPeople(t, "team-a", "team-b") // the tether:admins binding
	h, hubURL := hub(t, nil, "e2e")
	a := agent(t, "e2e", hubURL, agentToken)
	a.waitFor(t, 10*time.Second, `Connected to `+hubURL+` as "e2e"`)
	root := kubeconfigFor(t, hubURL, adminToken)
	k := func(env []string, args ...string) *exec.Cmd {
		cmd := cluster.KubectlCommand(t.Context(), root, args...)
		cmd.Env = append(cmd.Env, env...)
		return cmd
	}
	run := func(env []string, args ...string) string {
		t.Helper()
		var stderr bytes.Buffer
		cmd := k(env, args...)
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("kubectl %s: %v: %s", strings.Join(args, " "), err, stderr.String())
		}
		return string(out)
	}
	work := t.TempDir()
	createPod(t, ns, "clock", map[string]any{"command": []string{"sh", "-c", "echo hello; while true; do date; sleep 1; done"}, "workingDir": work}, "Always")
	run(nil, "wait", "-n", ns, "pod/clock", "--for=condition=Ready", "--timeout=60s")

	t.Run("logs -f", func(t *testing.T) {
		ctx, stop := context.WithCancel(t.Context())
		cmd := cluster.KubectlCommand(ctx, root, "logs", "-f", "-n", ns, "clock")
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { stop(); cmd.Wait() }()
		sc := bufio.NewScanner(out)
		if !sc.Scan() || sc.Text() != "hello" {
			t.Fatalf("first line %q", sc.Text())
		}
		// Lines keep coming as the container writes them, a second apart.
		for i := range 3 {
			if !sc.Scan() {
				t.Fatalf("logs -f ended after %d more lines: %v", i, sc.Err())
			}
		}
	})

	defer t.Run("a stopping hub lets an exec session finish", func(t *testing.T) {
		cmd := k(nil, "exec", "-n", ns, "clock", "--", "sh", "-c", "sleep 2; echo finished")
		var out syncbuf.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		h.signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil || out.String() != "finished\n" {
			t.Errorf("exec across the hub's shutdown: %v, %q", err, out.String())
		}
		if code := h.exit(t, 30*time.Second); code != 0 {
			t.Errorf("the hub exited %d", code)
		}
	})

	for _, tr := range transports {
		t.Run("exec over "+tr.name, func(t *testing.T) {
			cmd := k(tr.env, "exec", "-i", "-n", ns, "clock", "--", "sh", "-c", "cat; echo oops >&2; exit 3")
			cmd.Stdin = strings.NewReader("ping\n")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 3 {
				t.Errorf("exit: %v, want status 3; stderr %s", err, stderr.String())
			}
			if stdout.String() != "ping\n" || !strings.Contains(stderr.String(), "oops") {
				t.Errorf("stdout %q, stderr %q", stdout.String(), stderr.String())
			}
			// The hub's audit line says what ran, as kubectl sent it.
			want := streamLine{Method: tr.method, Path: "/api/v1/namespaces/" + ns + "/pods/clock/exec", Pod: "clock", Container: "main",
				Command: []string{"sh", "-c", "cat; echo oops >&2; exit 3"}, TTY: ptr(false), Stdin: ptr(true)}
			waitStreamLine(t, h.out, want)
		})

		t.Run("attach over "+tr.name, func(t *testing.T) {
			name := "cat-" + tr.name
			createPod(t, ns, name, map[string]any{"command": []string{"cat"}, "stdin": true, "stdinOnce": true}, "Never")
			run(nil, "wait", "-n", ns, "pod/"+name, "--for=condition=Ready", "--timeout=60s")
			cmd := k(tr.env, "attach", "-i", "-n", ns, name)
			cmd.Stdin = strings.NewReader("hello attach\n")
			out, err := cmd.Output()
			if err != nil || !strings.Contains(string(out), "hello attach") {
				t.Errorf("attach: %q, %v", out, err)
			}
			want := streamLine{Method: tr.method, Path: "/api/v1/namespaces/" + ns + "/pods/" + name + "/attach", Pod: name, Container: "main",
				TTY: ptr(false), Stdin: ptr(true)}
			waitStreamLine(t, h.out, want)
		})

		t.Run("port-forward over "+tr.name, func(t *testing.T) {
			portForward(t, ns, "echo-"+tr.name, k, tr.env)
			// kubectl names the ports in each stream's headers, not in the
			// request's query: the line has the pod and no ports.
			want := streamLine{Method: tr.method, Path: "/api/v1/namespaces/" + ns + "/pods/echo-" + tr.name + "/portforward", Pod: "echo-" + tr.name}
			waitStreamLine(t, h.out, want)
		})

		t.Run("cp over "+tr.name, func(t *testing.T) {
			local := t.TempDir()
			data := make([]byte, 1<<20)
			rand.Read(data)
			os.WriteFile(filepath.Join(local, "up"), data, 0o644)
			remote := filepath.Join(work, "cp-"+tr.name)
			run(tr.env, "cp", filepath.Join(local, "up"), ns+"/clock:"+remote)
			if got, err := os.ReadFile(remote); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("cp to the pod: %d bytes (%v), want %d", len(got), err, len(data))
			}
			run(tr.env, "cp", ns+"/clock:"+remote, filepath.Join(local, "down"))
			if got, err := os.ReadFile(filepath.Join(local, "down")); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("cp from the pod: %d bytes (%v), want %d", len(got), err, len(data))
			}
		})
	}
}

// createPod creates a pod with one container c on the test node (there is
// no scheduler), straight at the API server.
func createPod(t *testing.T, ns, name string, c map[string]any, restartPolicy string) {
	t.Helper()
	c["name"], c["image"] = "main", "busybox" // the image is ignored: containers are host processes
	pod := map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"nodeName": localkube.NodeName, "restartPolicy": restartPolicy,
			"terminationGracePeriodSeconds": 2, "containers": []any{c},
		},
	}
	if err := cluster.Do(t.Context(), "POST", "/api/v1/namespaces/"+ns+"/pods", pod, nil); err != nil {
		t.Fatal(err)
	}
}

// portForward runs this test binary as an echo server in pod name, and
// moves 10 MiB through `kubectl port-forward` to it and back.
func portForward(t *testing.T, ns, name string, k func([]string, ...string) *exec.Cmd, env []string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	podPort := freeAddr(t)
	createPod(t, ns, name, map[string]any{"command": []string{exe}, "env": []map[string]any{{"name": echoAddrEnv, "value": podPort}}}, "Never")
	if out, err := k(nil, "wait", "-n", ns, "pod/"+name, "--for=condition=Ready", "--timeout=60s").CombinedOutput(); err != nil {
		t.Fatalf("wait: %v %s", err, out)
	}
	_, port, _ := net.SplitHostPort(podPort)
	local := freeAddr(t)
	_, localPort, _ := net.SplitHostPort(local)
	pf := k(env, "port-forward", "-n", ns, "pod/"+name, localPort+":"+port)
	var pfOut syncbuf.Buffer
	pf.Stdout, pf.Stderr = &pfOut, &pfOut
	if err := pf.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { pf.Process.Kill(); pf.Wait() }()
	waitOutput(t, &pfOut, "Forwarding from 127.0.0.1:"+localPort)

	c, err := net.Dial("tcp", local)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	data := make([]byte, 10<<20)
	rand.Read(data)
	go func() {
		c.Write(data)
		c.(*net.TCPConn).CloseWrite()
	}()
	c.SetReadDeadline(time.Now().Add(60 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("port-forward moved %d of %d bytes back intact: %v\n%s", len(got), len(data), err, pfOut.String())
	}
}

// streamLine is what the tests read of the hub's audit line of an exec,
// attach or port-forward.
type streamLine struct {
	Method, Path   string
	Pod, Container string
	Command        []string
	TTY, Stdin     *bool
	Ports          []string
}

// waitStreamLine waits for the hub's audit line of want's request (its
// method and path; the hub writes it as the session ends, after kubectl
// has gone), and fails unless it says what want says.
func waitStreamLine(t *testing.T, out *syncbuf.Buffer, want streamLine) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var last streamLine
		for line := range strings.SplitSeq(out.String(), "\n") {
			var got streamLine
			if json.Unmarshal([]byte(line), &got) != nil || got.Method != want.Method || got.Path != want.Path {
				continue
			}
			if reflect.DeepEqual(got, want) {
				return
			}
			last = got
		}
		if time.Now().After(deadline) {
			t.Fatalf("no audit line %s within 10 s; the last of %s %s: %s", jsonText(want), want.Method, want.Path, jsonText(last))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func ptr[T any](v T) *T { return &v }

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
