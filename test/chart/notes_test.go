package chart

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/listfile"
	"github.com/tetherhq/tether/internal/testutil/helmtest"
)

// notes installs the chart as a server-side dry run, which is how helm
// renders NOTES.txt, and returns the notes.
func notes(t *testing.T, h *helmtest.Helm, release, ns, values string) string {
	t.Helper()
	out, err := h.Run("install", release, h.Chart, "--namespace", ns, "--dry-run=server", "-f", helmtest.ValuesFile(t, values))
	if err != nil {
		t.Fatal(err)
	}
	_, n, ok := strings.Cut(out, "\nNOTES:\n")
	if !ok {
		t.Fatalf("no NOTES in:\n%s", out)
	}
	return n
}

// The agent's notes print a command for the token's SHA-256 and one for
// the hub's agents-list entry. Run as printed, against a real API server,
// they give the hash the hub checks and an entry the hub's parser takes.
func TestAgentNotesGiveTheTokensHash(t *testing.T) {
	h := helmtest.New(t)
	c := apiServer(t)
	k := kube{t, c}
	h.Kubeconfig = c.AdminKubeconfig
	const ns = "notes-agent"
	k.must("create", "namespace", ns)
	token, err := fleet.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	// A Secret made from a file, so with a line break after the token,
	// which the agent ignores and the hash must too.
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	k.must("create", "secret", "generic", "edge-token", "-n", ns, "--from-file=token="+tokenFile)

	n := notes(t, h, "edge", ns, "mode: agent\nclusterName: edge-1\nagent:\n  hubUrl: https://tether.example.com\n  tokenSecret: edge-token\n")
	var hashCmd, entryCmd string
	for line := range strings.Lines(n) {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "kubectl get secret"):
			hashCmd = line
		case strings.HasPrefix(line, "printf "):
			entryCmd = line
		}
	}
	if hashCmd == "" || entryCmd == "" {
		t.Fatalf("the notes have no hash command or no entry command:\n%s", n)
	}

	// kubectl, as the notes' reader has it: pointed at the cluster.
	bin := t.TempDir()
	wrapper := "#!/bin/sh\nexec '" + c.Kubectl + "' --kubeconfig='" + c.AdminKubeconfig + "' \"$@\"\n"
	if err := os.WriteFile(filepath.Join(bin, "kubectl"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	sh := func(command string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", "-c", "set -o pipefail; "+command)
		cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "KUBERC=off")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", command, err, out)
		}
		return string(out)
	}

	want := listfile.TokenSHA256(token)
	if got := strings.Fields(sh(hashCmd)); len(got) == 0 || got[0] != want {
		t.Errorf("%s printed %q, want the token's SHA-256 %s", hashCmd, got, want)
	}
	entry := sh(entryCmd)
	list, err := fleet.ParseAgents(fleet.SettingAgents, []byte(entry))
	if err != nil {
		t.Fatalf("the hub refuses the entry the notes print:\n%s\n%v", entry, err)
	}
	if _, ok := fleet.New(list).Authenticate("edge-1", token); len(list) != 1 || !ok {
		t.Errorf("the entry the notes print doesn't admit edge-1 with its token:\n%s", entry)
	}
}

func TestHubNotes(t *testing.T) {
	h := helmtest.New(t)
	c := apiServer(t)
	h.Kubeconfig = c.AdminKubeconfig
	kube{t, c}.must("create", "namespace", "notes-hub")

	n := notes(t, h, "hub", "notes-hub", hubValues)
	for _, want := range []string{
		"WARNING: the hub serves plain HTTP and no ingress is set up",
		"fleet.agentsSecret is not set: the hub takes no agents",
		"curl -fsS -H \"Authorization: Bearer $TOKEN\" -o tether.kubeconfig https://tether.example.com/api/kubeconfig",
		"WARNING: hub.signingKeySecret is not set",
	} {
		if !strings.Contains(n, want) {
			t.Errorf("the hub's notes lack %q:\n%s", want, n)
		}
	}
	n = notes(t, h, "hub", "notes-hub", caseValues(t, "hub-full"))
	for _, want := range []string{
		`nginx.ingress.kubernetes.io/proxy-read-timeout: "3600"`,
		`nginx.ingress.kubernetes.io/proxy-send-timeout: "3600"`,
		`nginx.ingress.kubernetes.io/backend-protocol: "HTTPS"`,
		"The agents list is Secret tether-agents, key agents.yaml",
	} {
		if !strings.Contains(n, want) {
			t.Errorf("the hub's notes with an ingress lack %q:\n%s", want, n)
		}
	}
	if strings.Contains(n, "WARNING") {
		t.Errorf("the hub's notes warn with TLS and an ingress:\n%s", n)
	}
}

// Under strictMode the agent's notes say what the ceiling is, not that the
// agent may impersonate anyone.
func TestAgentNotesUnderStrictMode(t *testing.T) {
	h := helmtest.New(t)
	h.Kubeconfig = apiServer(t).AdminKubeconfig
	n := notes(t, h, "strict", "notes-strict", agentValues+"strictMode: true\nallowedNamespaces: [team-a]\naccess: [{group: dev, clusterRole: view}]\n")
	for _, want := range []string{
		"may act as any user in any group\nonly through constrained impersonation, and only within ceiling.rules in team-a (Roles strict-ceiling)",
		"It needs Kubernetes 1.36 or later",
		"access bound 1 entry of people to roles",
	} {
		if !strings.Contains(n, want) {
			t.Errorf("the notes lack %q:\n%s", want, n)
		}
	}
	if strings.Contains(n, "may impersonate") {
		t.Errorf("under strictMode the notes say the agent may impersonate:\n%s", n)
	}
	n = notes(t, h, "strict-own", "notes-strict", agentValues+"strictMode: true\nrbac:\n  create: false\n")
	if !strings.Contains(n, "`impersonate:user-info` on users, groups and userextras/tetherhq.github.io/request-id") {
		t.Errorf("with rbac.create false, the notes don't say what strictMode needs:\n%s", n)
	}
}
