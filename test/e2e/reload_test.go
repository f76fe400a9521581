package e2e

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/listfile"
)

// TestAgentsFileReloads swaps the hub's agents file the way Kubernetes
// updates a mounted Secret (a ..data symlink), and checks that the hub admits
// a new agent, keeps the last good list on a broken edit, and disconnects an
// agent whose entry is removed.
func TestAgentsFileReloads(t *testing.T) {
	dir := t.TempDir()
	version := 0
	publish := func(content string) {
		t.Helper()
		version++
		data := filepath.Join(dir, "..data_"+string(rune('0'+version)))
		if err := os.Mkdir(data, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(data, "agents.yaml"), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(filepath.Base(data), tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	entry := func(name string) string { return fleet.AgentsEntry(name, listfile.TokenSHA256(agentToken)) }
	publish(entry("first"))
	if err := os.Symlink("..data/agents.yaml", filepath.Join(dir, "agents.yaml")); err != nil {
		t.Fatal(err)
	}

	h, hubURL := hub(t, map[string]string{"TETHER_FLEET_AGENTS": "", "TETHER_FLEET_AGENTS_FILE": filepath.Join(dir, "agents.yaml")})
	refused := agent(t, "second", hubURL, agentToken)
	if code := refused.exit(t, 10*time.Second); code == 0 {
		t.Fatal("an agent not in the list was admitted")
	}

	publish(entry("first") + entry("second"))
	h.waitFor(t, 10*time.Second, `Reloaded the agents list`)
	second := agent(t, "second", hubURL, agentToken)
	second.waitFor(t, 10*time.Second, `Connected to `+hubURL+` as "second"`)

	publish("- name: Not A Label\n")
	h.waitFor(t, 10*time.Second, `The agents list has an error; keeping the last good one`)
	h.waitFor(t, time.Second, `TETHER_FLEET_AGENTS_FILE[0] (\"Not A Label\") needs a name that is a DNS label`)

	publish(entry("first"))
	h.waitFor(t, 10*time.Second, `The agents list changed: disconnecting an agent agent="second"`)
	if code := second.exit(t, 10*time.Second); code == 0 {
		t.Error("the removed agent exited 0, want a refusal")
	}
	second.waitFor(t, time.Second, "refused this agent: it doesn't know this name and token.")
}
