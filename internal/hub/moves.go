package hub

import (
	"context"
	"errors"
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
//
// Drain returns at once; the agents are asked at the pace the other
// replicas admit them (admission.go), a tenth of that pace each tenth of a
// second. Asked all at once, thousands of agents reached the others in the
// same second, most were refused, and each refusal (a TLS handshake) and
// its retry took the CPU the moves needed: at 6,000 agents on one machine,
// 600 of 4,200 moved in 30 s.
func (h *Hub) Drain() {
	h.mu.Lock()
	h.draining = true
	var movers []*agentConn
	// With no other replica there is nowhere to move to: the agents are
	// let go at shutdown, as from a hub that stops.
	if h.replicas.Load() > 1 {
		for _, c := range h.agents {
			if c.moves {
				movers = append(movers, c)
			}
		}
	}
	h.moveAll = len(movers) > 0
	h.mu.Unlock()
	rate := h.moveRate()
	h.log.Info("Draining: asking agents to move to another replica", "agents", len(movers), "perSecond", rate)
	h.conns.Add(1)
	go func() {
		defer h.conns.Done()
		h.askToMove(movers, rate)
	}()
}

// askToMove asks movers to move, a tenth of rate each tenth of a second on
// the hub's clock, until all are asked or the hub closes.
func (h *Hub) askToMove(movers []*agentConn, rate int) {
	batch := max(1, rate/10)
	tick := make(chan struct{}, 1)
	for len(movers) > 0 {
		n := min(batch, len(movers))
		for _, c := range movers[:n] {
			c.moving.Store(true)
			// Sent and not waited for: the connection stays until the
			// agent's new one is claimed.
			c.send(protocol.Message{Type: protocol.TypeGoAway, Reason: protocol.ReasonMove})
		}
		movers = movers[n:]
		if len(movers) == 0 {
			return
		}
		h.clock.AfterFunc(moveTick, func() { tick <- struct{}{} })
		select {
		case <-tick:
		case <-h.stop:
			return
		}
	}
}

// moveTick is how often a draining replica asks more agents to move.
const moveTick = 100 * time.Millisecond

// moveRate is how many agents a second the other replicas admit together.
// It reads only the replica count and the agents list, so it needs no h.mu.
func (h *Hub) moveRate() int {
	n := max(1, int(h.replicas.Load()))
	return admitRate(h.cfg.Agents.Len()/n) * max(1, n-1)
}

// WaitMoved returns once no agent that can move is still routed here
// (each has its new connection claimed by another replica, or has gone),
// or with ctx's error, and how many were left. A replica waits for it
// before it stops serving: an agent still here when it stops would leave
// its cluster unreachable until it connected again, and the requests for it
// meanwhile would fail. With thousands of agents the others admit them at
// their pace, which can take longer than the drain delay.
func (h *Hub) WaitMoved(ctx context.Context) (int, error) {
	tick := time.NewTicker(retiredPoll)
	defer tick.Stop()
	for {
		n := h.movingLeft()
		if n == 0 {
			return 0, nil
		}
		select {
		case <-ctx.Done():
			return n, ctx.Err()
		case <-tick.C:
		}
	}
}

// movingLeft counts the agents that can move still routed here, asked to
// move or waiting to be asked.
func (h *Hub) movingLeft() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.moveAll {
		return 0
	}
	n := 0
	for _, c := range h.agents {
		if c.moves {
			n++
		}
	}
	return n
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
	// The new holder has the inventory now.
	h.inventory.Forget(c.name)
	h.retireConnLocked(c)
}

// retireConnLocked closes c, an agent's connection it moved from and no
// longer routed to, once the streams open on it have ended, or at Close.
// Its kept connections to the API server (the probes', people's idle
// ones) are closed as they fall idle: they would hold it open for ever.
// h.mu is held.
func (h *Hub) retireConnLocked(c *agentConn) {
	h.retired[c] = struct{}{}
	h.conns.Add(1)
	go func() {
		defer h.conns.Done()
		tick := time.NewTicker(retiredPoll)
		defer tick.Stop()
		for {
			c.closeIdleConnections()
			if c.apiStreams() == 0 {
				break
			}
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
// streams: it lives only until they end.
const retiredPoll = 200 * time.Millisecond
