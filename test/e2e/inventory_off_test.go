package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/localkube"
)

// TestInventoryOffAgent: an agent with TETHER_INVENTORY=false connects and
// relays, and sends no inventory: the hub has no summary for its cluster,
// while another agent's, beside it, has one. An agent whose
// TETHER_INVENTORY_KINDS_EXTRA names Secrets doesn't start.
func TestInventoryOffAgent(t *testing.T) {
	if err := cluster.GrantInventory(t.Context(), localkube.Namespace, localkube.ServiceAccount); err != nil {
		t.Fatal(err)
	}
	_, hubURL := hub(t, nil, "inv-off", "inv-on")
	off := inventoryAgent(t, "inv-off", hubURL, map[string]string{"TETHER_INVENTORY": "false"})
	off.waitFor(t, 5*time.Second, "The inventory is off (TETHER_INVENTORY=false)")
	inventoryAgent(t, "inv-on", hubURL, nil)

	type summary struct{ NodesTotal, PodsNotReady *int }
	var on struct{ Summary summary }
	within(t, 15*time.Second, "the summary of inv-on", func() bool {
		on.Summary = summary{}
		apiGet(t, hubURL, adminToken, "/api/clusters/inv-on", &on)
		return on.Summary.PodsNotReady != nil
	})
	var c struct {
		Status  string
		Summary summary
	}
	if code := apiGet(t, hubURL, adminToken, "/api/clusters/inv-off", &c); code != 200 || c.Status != "Ready" || c.Summary.PodsNotReady != nil || c.Summary.NodesTotal != nil {
		t.Errorf("inv-off: %d, status %q, summary %+v; want Ready, and no counts", code, c.Status, c.Summary)
	}

	env := agentEnv(t, "inv-secrets", hubURL, agentToken, cluster.ServiceAccountDir)
	env["TETHER_INVENTORY_KINDS_EXTRA"] = "v1/configmaps,v1/secrets"
	p := start(t, "agent inv-secrets", env, "agent")
	p.waitFor(t, 15*time.Second, "TETHER_INVENTORY_KINDS_EXTRA (chart: inventory.extraKinds) names Secrets")
	if strings.Contains(p.out.String(), "Connected to") {
		t.Errorf("an agent whose extra kinds name Secrets connected:\n%s", p.out)
	}
}
