package hub

import (
	"time"

	"github.com/tetherhq/tether/internal/protocol"
)

// Replicas share the fleet (SPEC section 8), but an agent connects where
// the load balancer sends it and stays there: after a rolling update the
// replica restarted last held none, and a replica killed and started
// again stays empty. Two things even the replicas out, both through the
// make-before-break move (moves.go), while no replica drains:
//
//   - a replica holding more than its share, while another holds less,
//     asks a few of its agents a second to move (balance);
//   - a replica at or over its share, while another holds less, turns a
//     moving agent away before its upgrade (503, Retry-After 1), so that
//     the load balancer's next pick can be the replica with room.
//
// A replica knows what the others hold from their claims, and which of
// them are there from their claims streams (SetPeer). Counts can be a
// moment stale, and a replica just started may not be in the load
// balancer's rotation yet, so turning moves away is bounded: a replica
// turns a cluster's move away at most declineLimit times in
// declineWindow, then takes it wherever the load balancer sent it.

// load is how the fleet's agents are spread, as this replica counted them
// at its last balance tick.
type load struct {
	held  int  // agents held here, but those asked to move
	share int  // the clusters held anywhere ÷ the replicas, rounded up
	under bool // another replica holds less than its share by more than the slack
}

// slack is how far under its share a replica's holding may be before the
// others even it out: a tenth of the share, at least 1.
func slack(share int) int { return max(1, share/10) }

const (
	// balanceTick is how often a replica counts the spread and, holding
	// too many, asks some agents to move.
	balanceTick = time.Second
	// declineLimit and declineWindow bound how often a replica turns one
	// cluster's move away.
	declineLimit  = 2
	declineWindow = time.Minute
)

// declined counts the moves of one cluster a replica turned away since.
type declined struct {
	since time.Time
	n     int
}

// SetPeer tells the hub that replica's claims stream has given its full
// account (so its claims are what it holds, none included), and whether
// it drains (it takes no agents, and its own are moving away): then no
// replica evens out. ForgetReplica forgets it again.
func (h *Hub) SetPeer(replica string, draining bool) {
	h.mu.Lock()
	h.peers[replica] = draining
	h.mu.Unlock()
}

// countLoadLocked counts the spread of the fleet's agents over the
// replicas: this one and the others whose claims streams have given their
// account. While any of them drains it counts nothing, so nothing is
// evened out: the draining replica's agents move at the pace the others
// admit them together (moves.go), and steering them to the replica that
// holds fewest would leave them to its pace alone (at 6,000 agents, a
// replica's 2,978 moved in 25 s instead of 10). h.mu is held.
func (h *Hub) countLoadLocked() load {
	if h.draining || len(h.peers) == 0 {
		return load{}
	}
	for _, draining := range h.peers {
		if draining {
			return load{}
		}
	}
	active := 1 + len(h.peers)
	total, held := 0, 0
	for name, c := range h.agents {
		if _, direct := h.cfg.Direct[name]; direct {
			continue
		}
		total++
		if !c.moving.Load() {
			held++
		}
	}
	others := map[string]int{}
	for name := range h.claims {
		if h.agents[name] != nil {
			continue
		}
		total++
		if r := h.claimLocked(name).Replica; h.known(r) {
			others[r]++
		}
	}
	share := (total + active - 1) / active
	l := load{held: held, share: share}
	if held < share-slack(share) {
		return l // this one is the replica under its share
	}
	// A replica that holds none has no claims to count.
	l.under = len(others)+1 < active && share > slack(share)
	for _, n := range others {
		l.under = l.under || n < share-slack(share)
	}
	return l
}

// known reports whether replica's claims stream has given its account.
// h.mu is held.
func (h *Hub) known(replica string) bool {
	_, ok := h.peers[replica]
	return ok
}

// balance is the balance tick: it counts the spread and, if this replica
// holds more than its share and its slack while another holds less, asks
// agents to move, at most a fifth of a replica's admission pace a second,
// those with no stream open first. Once started it goes on down to the
// share, not the share and its slack, while another is still under.
func (h *Hub) balance() (time.Duration, bool) {
	now := h.clock.Now()
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return 0, false
	}
	l := h.countLoadLocked()
	h.load = l
	for name, d := range h.declined {
		if now.Sub(d.since) >= declineWindow {
			delete(h.declined, name)
		}
	}
	var movers []*agentConn
	if l.under && (l.held > l.share+slack(l.share) || h.evening && l.held > l.share) {
		want := min(l.held-l.share, max(1, admitRate(l.share)/5))
		var busy []*agentConn
		for name, c := range h.agents {
			if _, direct := h.cfg.Direct[name]; direct || !c.moves || c.moving.Load() {
				continue
			}
			if c.apiStreams() > 0 {
				busy = append(busy, c)
			} else if movers = append(movers, c); len(movers) == want {
				break
			}
		}
		movers = append(movers, busy[:min(len(busy), want-len(movers))]...)
	}
	h.mu.Unlock()
	// Said once as it starts, not each second it goes on.
	if len(movers) > 0 && !h.evening {
		h.log.Info("Evening out: asking agents to move to replicas that hold fewer", "held", l.held, "share", l.share, "perSecond", len(movers))
	}
	h.evening = len(movers) > 0
	if len(movers) > 0 {
		for _, c := range movers {
			c.moving.Store(true)
			c.send(protocol.Message{Type: protocol.TypeGoAway, Reason: protocol.ReasonMove})
		}
	}
	return balanceTick, true
}

// declineMove reports whether a moving agent of cluster name should be
// turned away, to try another replica: this one holds its share or more
// while another holds less, and hasn't turned this cluster's move away
// declineLimit times in declineWindow.
func (h *Hub) declineMove(name string) bool {
	now := h.clock.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.load.under || h.load.held < h.load.share {
		return false
	}
	d := h.declined[name]
	if now.Sub(d.since) >= declineWindow {
		d = declined{since: now}
	}
	if d.n >= declineLimit {
		return false
	}
	d.n++
	h.declined[name] = d
	return true
}
