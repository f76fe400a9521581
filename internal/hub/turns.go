package hub

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The hub's own requests (probes, access reviews) each need a TLS
// connection to their cluster's API server, made through its agent. When
// many agents connect at once (a hub or replica started, one killed and
// its agents taken in), their first probes all need one, and a handshake
// costs far more than a probe on a kept connection (1.4 ms of the hub's
// CPU, decision 019). Made all at once, the handshakes share the CPU and
// each takes longer, until few end before their probe's timeout or their
// own: the rest are thrown away and tried again 10 s later, and the
// clusters hardly come Ready. At 15,000 agents on three replicas on 2
// cores, 3,867 to 4,100 of the 15,000 were Ready two minutes after their
// API servers began to answer.
//
// So the hub's own dials to API servers take turns: at most OwnDials
// at once, the others waiting, in order, for a place. A turn covers the
// whole dial (the stream, the agent reaching the API server, the
// handshake). Taken only for the handshake, turns let every agent dial at
// once: at 15,000 agents 53 to 928 clusters were Ready after two minutes,
// a replica's dials waiting mostly for their agents to reach the bench's
// one stand-in API server. A cluster whose API server doesn't answer holds
// a place until its agent's dial gives up (10 s); only connections being
// made wait behind it, never a probe on a kept one.
//
// A probe that gives up while its dial waits records its timeout as
// before; the dial goes on (net/http's transport dials on for the next
// request), and the next probes send nothing until it ends (probe), then
// take its connection. People's requests don't wait here: there are few
// at once, and a person waiting behind the fleet's probes would see it.

// DefaultOwnDials is how many of the hub's own dials to API servers
// (each ending in a TLS handshake) are under way at once. One through an agent
// takes about two round trips to the API server: at 256 at once, round
// trips of 150 ms still let a hub make 800 a second, more than its
// admission pace takes agents in (admission.go, 500 a second for 10,000
// agents).
const DefaultOwnDials = 256

// turnWait bounds how long a dial waits for its turn: past it the hub is
// far behind, and a dial that waited this long would go stale anyway.
const turnWait = 30 * time.Second

// errNoTurn is a dial that waited turnWait for its turn.
var errNoTurn = fmt.Errorf("the hub's own dials to API servers took every place for %s", turnWait)

// takeTurn waits for a place among the hub's own dials under way, until
// ctx ends or gone closes (the agent's tunnel), and returns the function
// that gives it back.
func (h *Hub) takeTurn(ctx context.Context, gone <-chan struct{}) (func(), error) {
	wait := time.NewTimer(turnWait)
	defer wait.Stop()
	select {
	case h.turns <- struct{}{}:
		return func() { <-h.turns }, nil
	case <-gone:
		return nil, errors.New("the agent's tunnel closed")
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	case <-wait.C:
		return nil, errNoTurn
	}
}
