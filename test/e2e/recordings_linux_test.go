package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/testutil/ptytest"
)

// TestExecIsRecorded runs `kubectl exec -it` through the hub with
// recordings on, over WebSocket and SPDY, on a terminal of 40 rows and 100
// columns, and checks that each session's recording holds what the command
// printed and the terminal's size, and that its audit line names it.
func TestExecIsRecorded(t *testing.T) {
	ns := unique("rec")
	admin(t, "create", "namespace", ns)
	setUpPeople(t, "team-a", "team-b")
	dir := t.TempDir()
	h, hubURL := hub(t, map[string]string{"TETHER_RECORDINGS_DIR": dir}, "e2e")
	a := agent(t, "e2e", hubURL, agentToken)
	a.waitFor(t, 10*time.Second, `Connected to `+hubURL+` as "e2e"`)
	root := kubeconfigFor(t, hubURL, adminToken)
	startClock(t, root, ns)
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			word := "recorded-over-" + tr.name
			execOnTerminal(t, root, ns, "stty size; echo "+word, word, tr.env...)
			id := waitRecordingLine(t, h.out.String, tr.method, "/api/v1/namespaces/"+ns+"/pods/clock/exec")
			cast, err := os.ReadFile(filepath.Join(dir, "e2e", id+".cast"))
			if err != nil {
				t.Fatal(err)
			}
			c := string(cast)
			if !strings.Contains(c, word) || !strings.Contains(c, "40 100") ||
				!(strings.Contains(c, `"width":100,"height":40`) || strings.Contains(c, `"r","100x40"`)) {
				t.Errorf("the recording %s holds %q; want the command's output and the terminal's size", id, c)
			}
		})
	}
}

// startClock runs the pod clock in ns, which sleeps until it is deleted,
// and waits for it to be Ready: a pod to exec into.
func startClock(t *testing.T, root, ns string) {
	t.Helper()
	createPod(t, ns, "clock", map[string]any{"command": []string{"sh", "-c", "while true; do sleep 1; done"}}, "Always")
	if out, err := cluster.KubectlCommand(t.Context(), root, "wait", "-n", ns, "pod/clock", "--for=condition=Ready", "--timeout=60s").CombinedOutput(); err != nil {
		t.Fatalf("wait: %v: %s", err, out)
	}
}

// execOnTerminal runs `kubectl exec -it` of the shell script in the pod
// clock of ns, with env added to kubectl's, on a terminal of 40 rows and
// 100 columns, and fails the test unless it ends well, having printed
// word.
func execOnTerminal(t *testing.T, root, ns, script, word string, env ...string) {
	t.Helper()
	ptm, pts, err := ptytest.Open(40, 100)
	if err != nil {
		t.Fatal(err)
	}
	defer ptm.Close()
	cmd := cluster.KubectlCommand(t.Context(), root, "exec", "-it", "-n", ns, "clock", "--", "sh", "-c", script)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = pts, pts, pts
	err = cmd.Start()
	pts.Close()
	if err != nil {
		t.Fatal(err)
	}
	ptm.SetReadDeadline(time.Now().Add(time.Minute))
	var out bytes.Buffer
	out.ReadFrom(ptm) // until EIO, once kubectl exits
	if err := cmd.Wait(); err != nil || !strings.Contains(out.String(), word) {
		t.Fatalf("kubectl exec -it: %v: %q", err, out.String())
	}
}

// waitRecordingLine waits for the audit line of an exec with a recording
// not yet seen, and returns the recording's id.
func waitRecordingLine(t *testing.T, out func() string, method, path string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for line := range strings.SplitSeq(out(), "\n") {
			var got struct {
				Method, Path, RequestID, Recording, RecordingStopped string
			}
			if json.Unmarshal([]byte(line), &got) != nil || got.Method != method || got.Path != path || got.Recording == "" {
				continue
			}
			if got.Recording != got.RequestID || got.RecordingStopped != "" {
				t.Fatalf("audit line: recording %q of request %q, stopped %q", got.Recording, got.RequestID, got.RecordingStopped)
			}
			return got.Recording
		}
		if time.Now().After(deadline) {
			t.Fatalf("no audit line of %s %s with a recording within 10 s", method, path)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
