package server

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/listfile"
	"github.com/tetherhq/tether/internal/protocol"
	"github.com/tetherhq/tether/internal/testutil/hostileagent"
	"github.com/tetherhq/tether/internal/web"
)

// pods is an inventory update of n pods of about 100 KiB each (a label
// nearly that long), named from first on: ten fit a frame.
func pods(first, n int) *protocol.Update {
	u := &protocol.Update{}
	for i := first; i < first+n; i++ {
		u.Upserts = append(u.Upserts, protocol.Resource{ResourceRef: protocol.ResourceRef{Kind: "pods", Namespace: "a", Name: fmt.Sprint(i)},
			Labels: map[string]string{"x": strings.Repeat("x", 90<<10)}})
	}
	return u
}

// TestAHostileAgentsInventoryIsBoundedAndRefusedFirst (issue 33, item 3):
// an agent whose token was stolen sends a snapshot, then a second one that
// never completes, as large as the hub takes. The hub holds no more than
// TETHER_INVENTORY_MAX_BYTES of inventory whatever it sends; the clusters
// that come after it get their inventories whole, and the hostile one is
// marked too large, with why, where people see the inventory's problems.
// When its connection ends mid-snapshot, the snapshot is let go.
func TestAHostileAgentsInventoryIsBoundedAndRefusedFirst(t *testing.T) {
	const bound = 16 << 20
	people, err := auth.New(auth.Config{Users: testUsers})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { people.Close() })
	var list []fleet.Agent
	for _, n := range []string{"hostile", "good-1", "good-2"} {
		list = append(list, fleet.Agent{Name: n, TokenHashes: []listfile.Hash{listfile.HashToken(testToken)}, Groups: fleet.Groups{Everyone: true}})
	}
	h := startHub(t, Config{Agents: fleet.New(list), Auth: people, InventoryMaxBytes: bound})
	connect := func(name string) (*hostileagent.Agent, *hostileagent.Inventory) {
		a, err := hostileagent.Dial(t.Context(), hostileagent.Config{HubURL: h.url, Name: name, Token: testToken})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close() })
		a.HandleStreams(hostileagent.DialError("no API server here"))
		inv, err := a.OpenInventory(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return a, inv
	}
	send := func(inv *hostileagent.Inventory, u *protocol.Update) {
		if err := inv.Send(u); err != nil {
			t.Fatal(err)
		}
		if b := h.inventory.Bytes(); b > bound {
			t.Fatalf("the hub holds %d bytes of inventory, over %d", b, bound)
		}
	}
	cluster := func(name string) web.ClusterJSON {
		code, body, _ := call(t, "GET", h.url+"/api/clusters/"+name, aliceToken, nil)
		var c web.ClusterJSON
		if err := json.Unmarshal([]byte(body), &c); code != 200 || err != nil {
			t.Fatalf("/api/clusters/%s: %d %s", name, code, body)
		}
		return c
	}

	hostile, hinv := connect("hostile")
	first := pods(0, 10)
	first.Snapshot, first.Complete, first.Kinds = true, true, []protocol.KindState{{Kind: "pods"}}
	send(hinv, first)
	for i := range 30 { // a second snapshot, of 30 MiB, never complete
		u := pods(1000+i*10, 10)
		u.Snapshot = i == 0
		send(hinv, u)
	}
	eventually(t, 10*time.Second, "the hostile snapshot fills the hub's bound", func() bool { return h.inventory.Bytes() > bound*3/4 })

	for _, name := range []string{"good-1", "good-2"} {
		_, inv := connect(name)
		u := pods(0, 20) // 2 MiB, well within a third of the bound
		u.Snapshot, u.Complete, u.Kinds = true, true, []protocol.KindState{{Kind: "pods"}}
		for _, half := range []*protocol.Update{{Snapshot: true, Kinds: u.Kinds, Upserts: u.Upserts[:10]}, {Complete: true, Upserts: u.Upserts[10:]}} {
			send(inv, half)
		}
		eventually(t, 10*time.Second, name+"'s inventory", func() bool {
			c := cluster(name)
			return c.Summary != nil && c.Summary.PodsNotReady != nil && *c.Summary.PodsNotReady == 20
		})
		// The hostile agent tries again, each time.
		for i := range 20 {
			u := pods(5000+i*10, 10)
			u.Snapshot = i == 0
			send(hinv, u)
		}
	}
	eventually(t, 10*time.Second, "the hostile cluster marked too large", func() bool {
		c := cluster("hostile")
		return c.Inventory != nil && strings.Contains(c.Inventory.TooLarge, "TETHER_INVENTORY_MAX_BYTES")
	})
	for _, name := range []string{"good-1", "good-2"} {
		if c := cluster(name); c.Inventory == nil || c.Inventory.TooLarge != "" || c.Inventory.Truncated || *c.Summary.PodsNotReady != 20 {
			t.Errorf("%s: %+v %+v; want its 20 pods, whole", name, c.Inventory, c.Summary)
		}
	}
	if !strings.Contains(h.logs.String(), `A cluster's inventory was too large cluster="hostile"`) {
		t.Errorf("no warning logged:\n%s", h.logs)
	}

	// Its connection ends mid-snapshot: the snapshot goes with it.
	u := pods(9000, 5)
	u.Snapshot = true
	send(hinv, u)
	eventually(t, 10*time.Second, "the hostile snapshot begun again", func() bool {
		b := h.inventory.ClusterBytes("hostile")
		return b > 400<<10 && b < 600<<10
	})
	hostile.Close()
	eventually(t, 10*time.Second, "the hostile snapshot let go", func() bool { return h.inventory.ClusterBytes("hostile") == 0 })
}
