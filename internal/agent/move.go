package agent

import (
	"context"
	"errors"
	"time"
)

// moveSpread bounds the random wait before the agent connects again after a
// move goaway: a draining replica asks all its agents at once, and this
// spreads their arrival at the others over half a second, without holding
// any back for long (the old connection serves meanwhile).
const moveSpread = 500 * time.Millisecond

// drain serves c, a connection the hub asked the agent to move from, until
// the hub closes it (its streams done, or its shutdown grace over) or the
// agent stops. Its end is expected, and the agent connects no more for it; a
// takeover on it stops the agent, through stop.
func (c *conn) drain(ctx context.Context, stop context.CancelCauseFunc) {
	a := c.a
	defer func() {
		c.close()
		a.draining.Add(-1)
		a.live.Add(-1)
	}()
	select {
	case r := <-c.ended:
		var refused *RefusedError
		if errors.As(r.err, &refused) {
			stop(refused)
			return
		}
		a.log.Info("The hub closed the connection this agent moved from", "hub", a.hub, "err", r.err)
	case <-ctx.Done():
		c.goodbye("agent stopping")
	}
}
