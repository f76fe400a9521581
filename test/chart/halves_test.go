package chart

import (
	"strings"
	"testing"

	"github.com/tetherhq/tether/internal/testutil/helmtest"
)

// TestProxyValues: proxy.enabled (issue 36, SPEC section 9) as the agent's
// TETHER_PROXY. With the proxy off the impersonation RBAC stays, for the
// hub's access reviews, which impersonate each person to filter the
// inventory (decision 030); both halves off is refused at render.
func TestProxyValues(t *testing.T) {
	h := helmtest.New(t)
	if got := agentEnv(t, render(t, h, "t", "tether", agentValues))("TETHER_PROXY"); got != "" {
		t.Errorf("by default TETHER_PROXY=%q, want it unset", got)
	}
	objs := render(t, h, "t", "tether", agentValues+"proxy:\n  enabled: false\n")
	if got := agentEnv(t, objs)("TETHER_PROXY"); got != "false" {
		t.Errorf("proxy off: TETHER_PROXY=%q, want false", got)
	}
	var impersonate, inventory bool
	for _, o := range objs {
		impersonate = impersonate || (o.Kind() == "ClusterRole" && o.Name() == "t-impersonate")
		inventory = inventory || strings.HasPrefix(o.Name(), "t-inventory")
	}
	if !impersonate || !inventory {
		t.Errorf("proxy off: impersonation RBAC %v, inventory RBAC %v; want both, for the access reviews and the inventory", impersonate, inventory)
	}

	_, err := h.Template("t", "tether", agentValues+"proxy:\n  enabled: false\ninventory:\n  enabled: false\n")
	if err == nil || !strings.Contains(err.Error(), "proxy.enabled and inventory.enabled are both false: the agent would do nothing") {
		t.Errorf("both halves off: %v, want a refusal saying so", err)
	}
	for _, v := range []string{"proxy:\n  enabled: \"no\"\n", "proxy:\n  on: true\n"} {
		if _, err := h.Template("t", "tether", agentValues+v); err == nil {
			t.Errorf("%q accepted", v)
		}
	}
}
