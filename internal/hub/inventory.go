package hub

import (
	"errors"
	"io"
	"net"

	"github.com/tetherhq/tether/internal/protocol"
)

// receiveInventory reads the agent's inventory stream into the hub's store
// until the stream or the connection ends. Who closes st: the caller.
func (h *Hub) receiveInventory(c *agentConn, st net.Conn) {
	rcv := h.inventory.Receiver(c.name)
	// A snapshot never completed is let go with its connection (issue 33).
	defer rcv.Close()
	for {
		u, err := protocol.ReadUpdate(st)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				select {
				case <-c.done:
				default:
					h.log.Warn("An inventory stream broke; the hub keeps what it had", "agent", c.name, "err", err)
				}
			}
			return
		}
		// An agent taken over may still be talking: only the cluster's
		// current agent writes its inventory.
		if h.connected(c.name) != c {
			return
		}
		if rcv.Apply(u, h.clock.Now()) {
			h.events.changed(c.name)
		}
	}
}

// inventoryDropped is told of a cluster whose inventory the store dropped:
// it took more than its share of TETHER_INVENTORY_MAX_BYTES.
func (h *Hub) inventoryDropped(cluster string) {
	if info, ok := h.inventory.Info(cluster); ok && info.TooLarge != "" {
		h.log.Warn("A cluster's inventory was too large", "cluster", cluster, "why", info.TooLarge)
	}
	h.events.changed(cluster)
}
