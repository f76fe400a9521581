package hub

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"

	"github.com/tetherhq/tether/internal/protocol"
)

// An agent without the proxy (its hello's proxyOff, SPEC section 9) gets
// no stream for a person's request (takeStream), and the open frame at the
// head of the hub's own (markOwn).

// The streams to a cluster's API server through its agent are bounded:
// MaxStreamsPerAgent for people's requests, reservedStreams more for the
// hub's own, each counted apart and sent through pools of their own, so
// people at their bound can't take the hub's (issue 33).

// takeStream counts a stream about to open, if its bound lets it, and
// returns the count it is in. At the people's bound it first closes their
// clients' idle connections, whose streams count too, and tries once more.
func (c *agentConn) takeStream(own bool) (*atomic.Int64, error) {
	if c.proxyOff && !own {
		// kubeproxy answers before it gets here; this is the hub's
		// own check, and the agent makes its own too (agent.relay).
		return nil, ErrProxyOff
	}
	count, limit := &c.streams, int64(c.hub.cfg.MaxStreamsPerAgent)
	if own {
		count, limit = &c.ownStreams, reservedStreams
	}
	for try := 0; ; try++ {
		if count.Add(1) <= limit {
			return count, nil
		}
		count.Add(-1)
		if own || try > 0 {
			break
		}
		c.dropIdle()
	}
	if own {
		return nil, fmt.Errorf("the hub has %d requests of its own open to cluster %q, the most it sends", reservedStreams, c.name)
	}
	c.hub.metrics.streamsRefused.WithLabelValues(c.name).Inc()
	return nil, &StreamLimitError{cluster: c.name, limit: c.hub.cfg.MaxStreamsPerAgent}
}

// markOwn writes, on a stream the hub just opened for its own request to
// an agent without the proxy, the open frame that agent waits for before
// it dials (decision 030). Other agents are sent nothing: they dial at
// once, and would pass the frame on to their API server.
func (c *agentConn) markOwn(st net.Conn) error {
	if !c.proxyOff {
		return nil
	}
	if err := protocol.Write(st, protocol.Message{Type: protocol.TypeOpen, Own: true}); err != nil {
		return fmt.Errorf("the agent's tunnel: %w", err)
	}
	return nil
}

// ownKey marks the context of a request the hub sends for itself: a probe
// or an access review.
type ownKey struct{}

// OwnRequest marks ctx as the hub's own, for dial: a request made with
// it goes on the streams kept for the hub's probes and access reviews.
func OwnRequest(ctx context.Context) context.Context {
	return context.WithValue(ctx, ownKey{}, true)
}

// IsOwnRequest reports whether ctx is OwnRequest's: a replica that
// carries another's request to a cluster says so (internal/peers).
func IsOwnRequest(ctx context.Context) bool { return ctx.Value(ownKey{}) != nil }

// StreamLimit is the error of a request refused at MaxStreamsPerAgent
// streams to cluster: one replica carrying another's request gives back
// the one its agent's connection gave.
func StreamLimit(cluster string, limit int) *StreamLimitError {
	return &StreamLimitError{cluster: cluster, limit: limit}
}

// Limit is the bound the request met.
func (e *StreamLimitError) Limit() int { return e.limit }

// ErrProxyOff is a person's request to a cluster whose agent runs without
// the proxy (TETHER_PROXY=false): the hub opens no stream for it.
var ErrProxyOff = errors.New("the cluster's agent takes no one's requests (TETHER_PROXY=false)")

// StreamLimitError is a request refused because the cluster's streams were
// at MaxStreamsPerAgent.
type StreamLimitError struct {
	cluster string
	limit   int
}

func (e *StreamLimitError) Error() string {
	return fmt.Sprintf("cluster %q has %d requests open through its agent, the most Tether sends to one cluster at once (TETHER_MAX_STREAMS_PER_AGENT); try again once some have ended", e.cluster, e.limit)
}

// hubTransport is the transport of the hub's own requests: the probes and
// access reviews. It is made on first use, counted in use until done is
// called, and let go once it holds no connection (done).
func (c *agentConn) hubTransport() (t *http.Transport, done func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ownTransport == nil {
		t := c.newTransport()
		dial := t.DialTLSContext
		t.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			return dial(OwnRequest(ctx), network, addr)
		}
		t.MaxIdleConnsPerHost = reservedStreams / 2
		// Small buffers: every agent whose API server answers keeps a
		// probe's connection, and its answers (and requests, a token
		// and a few headers) are small.
		t.ReadBufferSize, t.WriteBufferSize = 2<<10, 2<<10
		c.ownTransport = t
	}
	c.ownUsers++
	t = c.ownTransport
	return t, func() { c.hubTransportDone(t) }
}

// hubTransportDone ends a use of t, the hub's own transport. Once no
// request of the hub's own is under way and none of its streams is open,
// t holds no connection to keep, and the agent's connection lets it go: an
// agent whose API server can't be reached held, between probes, a
// transport with what net/http keeps of its last request (the wait for an
// idle connection, about 2 KiB). The next probe makes another; it would
// have dialed anyway.
func (c *agentConn) hubTransportDone(t *http.Transport) {
	c.mu.Lock()
	c.ownUsers--
	drop := c.ownUsers == 0 && c.ownStreams.Load() == 0 && c.ownDials.Load() == 0 && c.ownTransport == t
	if drop {
		c.ownTransport = nil
	}
	c.mu.Unlock()
	if drop {
		// A dial still under way for a request that gave up (net/http
		// dials on, for the next request) ends with a connection no
		// request of t takes: t closes it rather than keep it idle.
		t.CloseIdleConnections()
	}
}

// dropIdle closes the idle connections people's transport keeps now, and goes
// on keeping the next: their streams count against MaxStreamsPerAgent.
func (c *agentConn) dropIdle() {
	c.mu.Lock()
	t := c.transport
	c.mu.Unlock()
	if t != nil {
		t.CloseIdleConnections()
	}
}

// Spliced is what a replica that reaches a cluster through the agent
// connected here needs (internal/peers): a stream to the API server,
// counted and bounded as the hub's own are, and the CA and service account
// that the TLS and the requests it sends over it take. An Upstream of an
// agent connected here is one.
type Spliced interface {
	// DialStream opens a stream to the API server through the agent; a
	// ctx of OwnRequest's takes one of the hub's own streams.
	DialStream(ctx context.Context) (net.Conn, error)
	// Credentials are the CA (DER) the API server's certificate must
	// chain to, and the Authorization the agent's service account makes.
	Credentials() (ca [][]byte, serviceAccountAuth string)
}

var _ Spliced = (*agentConn)(nil)

func (c *agentConn) DialStream(ctx context.Context) (net.Conn, error) { return c.dial(ctx) }

func (c *agentConn) Credentials() ([][]byte, string) { return c.ca, c.serviceAccountAuth() }
