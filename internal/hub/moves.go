package hub

import (
	"errors"
	"sync"
	"time"

	"github.com/tetherhq/tether/internal/protocol"
)

// A replica that is stopping (a rolling update) moves its agents before it
// lets them go (issue 35: make-before-break). Drain asks each agent that
// can move to connect again, to another replica, while its connection here
// stays; once another replica claims the cluster (SetClaim), this one
// routes to it, and the old connection lives on, for none but the streams
// already open on it, until they end or the hub closes.

// Drain asks every agent connected here that can move (its hello said
// moves) to connect again elsewhere, and from now on refuses new agents
// with 503 and Retry-After. Agents from before moves stay until Close
// sends them away, as on a hub that stops.
func (h *Hub) Drain() {
	h.mu.Lock()
	h.draining = true
	var movers []*agentConn
	for _, c := range h.agents {
		if c.moves {
			c.moving.Store(true)
			movers = append(movers, c)
		}
	}
	h.mu.Unlock()
	h.log.Info("Draining: asking agents to move to another replica", "agents", len(movers))
	var wg sync.WaitGroup
	next := make(chan *agentConn)
	for range min(len(movers), goAwayWorkers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range next {
				// Sent and not waited for: the connection stays until
				// the agent's new one is claimed.
				c.send(protocol.Message{Type: protocol.TypeGoAway, Reason: protocol.ReasonMove})
			}
		}()
	}
	for _, c := range movers {
		next <- c
	}
	close(next)
	wg.Wait()
}

// retireLocked takes c, which this hub asked to move and whose new
// connection another replica now holds, out of the routing: requests go
// to that replica from now on, and c is closed once the streams open on it
// have ended. h.mu is held.
func (h *Hub) retireLocked(c *agentConn) {
	if h.agents[c.name] != c {
		return
	}
	delete(h.agents, c.name)
	h.metrics.connected.Dec()
	h.retired[c] = struct{}{}
	// The new holder has the inventory now.
	h.inventory.Forget(c.name)
	h.conns.Add(1)
	go func() {
		defer h.conns.Done()
		tick := time.NewTicker(retiredPoll)
		defer tick.Stop()
		for c.apiStreams() > 0 {
			select {
			case <-c.done:
				return
			case <-tick.C:
			}
		}
		c.end(errors.New("it moved to another hub replica"))
	}()
}

// retiredPoll is how often a retired connection is checked for open
// streams: it lives only while a replica drains.
const retiredPoll = 200 * time.Millisecond
