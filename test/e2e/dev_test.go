package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDev runs `tether dev` as the README says, and checks that Ctrl-C
// stops everything it started.
func TestDev(t *testing.T) {
	addr := freeAddr(t)
	p := start(t, "tether dev", nil, "dev", "--addr", addr)
	p.waitFor(t, 60*time.Second, "hub:              https://"+addr)
	p.waitFor(t, 20*time.Second, `Cluster "dev" is Ready (Kubernetes v1.36.3)`)
	kubeconfig := between(p.out.String(), "kubeconfig:       ", " (through the hub")
	if kubeconfig == "" {
		t.Fatalf("no kubeconfig path printed:\n%s", p.out)
	}
	dir := filepath.Dir(kubeconfig)
	// Both kubectls: the one built with the API server, and the machine's.
	for _, kubectl := range []string{cluster.Kubectl, "kubectl"} {
		out, err := exec.Command(kubectl, "--kubeconfig", kubeconfig, "get", "namespaces").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "kube-system") {
			t.Errorf("%s --kubeconfig %s get namespaces: %v\n%s", kubectl, kubeconfig, err, out)
		}
	}

	p.signal(syscall.SIGINT)
	if code := p.exit(t, 30*time.Second); code != 0 {
		t.Errorf("tether dev exited %d on Ctrl-C, want 0", code)
	}
	p.waitFor(t, time.Second, "Stopped the Kubernetes API server")
	// Nothing it started is left running.
	if procs := processesMentioning(t, dir); len(procs) > 0 {
		t.Errorf("processes of %s still run: %q", dir, procs)
	}
}

// processesMentioning lists the command lines, from /proc, that contain s.
func processesMentioning(t *testing.T, s string) []string {
	t.Helper()
	cmdlines, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil || len(cmdlines) == 0 {
		t.Fatalf("can't list processes: %v", err)
	}
	var found []string
	for _, f := range cmdlines {
		b, err := os.ReadFile(f)
		if err == nil && strings.Contains(string(b), s) {
			found = append(found, strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return found
}

func between(s, from, to string) string {
	_, rest, ok := strings.Cut(s, from)
	if !ok {
		return ""
	}
	v, _, ok := strings.Cut(rest, to)
	if !ok {
		return ""
	}
	return v
}
