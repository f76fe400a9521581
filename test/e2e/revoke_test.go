package e2e

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestKubectlEndsWhenTheUsersListDropsThePerson: `kubectl get --watch`
// with a kubeconfig the hub issued, and `kubectl exec` with a static
// token, both through the hub, end within 5 s of the hub reloading a users
// file that no longer has their people; the hub's audit lines say they
// were revoked.
func TestKubectlEndsWhenTheUsersListDropsThePerson(t *testing.T) {
	ns := unique("revoke")
	setUpPeople(t, ns, unique("revoke-hidden"))
	admin(t, "create", "configmap", "before", "-n", ns, "--from-literal=k=v")
	createPod(t, ns, "shell", map[string]any{"command": []string{"sh", "-c", "while true; do sleep 1; done"}}, "Always")
	users := filepath.Join(t.TempDir(), "users.yaml")
	if err := os.WriteFile(users, []byte(testUsers), 0o600); err != nil {
		t.Fatal(err)
	}
	h, hubURL := hub(t, map[string]string{"TETHER_USERS": "", "TETHER_USERS_FILE": users}, "e2e")
	a := agent(t, "e2e", hubURL, agentToken)
	a.waitFor(t, 10*time.Second, `Connected to `+hubURL+` as "e2e"`)
	alice := kubeconfigFor(t, hubURL, aliceToken)
	root := staticKubeconfig(t, hubURL, "e2e", adminToken)
	if out, err := kubectl(t, root, "wait", "-n", ns, "pod/shell", "--for=condition=Ready", "--timeout=60s"); err != nil {
		t.Fatalf("wait: %v %s", err, out)
	}

	watch := startKubectl(t, alice, nil, "get", "configmaps", "-n", ns, "-w", "--output-watch-events", "-o", "jsonpath={.type} {.object.metadata.name}{\"\\n\"}")
	waitOutput(t, watch.out, "ADDED before\n")
	// An *os.File, so Wait doesn't wait for a goroutine copying stdin.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	execSession := startKubectl(t, root, r, "exec", "-i", "-n", ns, "shell", "--", "cat")
	r.Close()
	io.WriteString(w, "ping\n")
	waitOutput(t, execSession.out, "ping")

	const carol = "- name: carol\n  token: carol-e2e-token-0123456789abcdef0123456789\n"
	written := time.Now()
	if err := os.WriteFile(users, []byte(carol), 0o600); err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, 10*time.Second, "Reloaded the users list")
	for _, c := range []struct {
		b    *background
		name string
	}{{watch, "alice's kubectl get --watch"}, {execSession, "admin's kubectl exec"}} {
		end := c.b.ended(t, 5*time.Second, c.name)
		t.Logf("%s ended %s after the users file was written: %v", c.name, end.Sub(written).Round(time.Millisecond), c.b.err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for strings.Count(h.out.String(), `"ended":"revoked"`) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no two audit lines ended revoked:\n%s", h.out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if out, err := kubectl(t, alice, "get", "configmaps", "-n", ns); err == nil {
		t.Errorf("alice's kubeconfig still works after she left the list:\n%s", out)
	}
}
