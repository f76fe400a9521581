package hub

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetherhq/tether/internal/listfile"
	"github.com/tetherhq/tether/internal/protocol"
	"github.com/tetherhq/tether/internal/tunnel"
)

// WebSocket close codes the hub sends (docs/protocol.md). The agent learns
// the reason from a goaway first; the close code is for proxies and people.
const (
	closeShutdown = 4000
	closeTakeover = 4001
	closeSilent   = 4002
	closeRemoved  = 4003
)

type goAwayKind int

const (
	goAwayShutdown goAwayKind = iota
	goAwayTakeover
	goAwayRemoved
)

// agentConn is one welcomed agent connection.
type agentConn struct {
	hub          *Hub
	name         string
	remote       string
	sess         *tunnel.Session
	ctl          net.Conn
	tokenHash    listfile.Hash // its token's SHA-256, and its CA's: checked again against
	caHash       listfile.Hash // the list in force when it is registered, and at reloads
	agentVersion string
	apiServer    string
	// ceiling is what its hello said of the cluster owner's ceiling (SPEC
	// section 9): protocol.CeilingOff, …Enforced or …Unavailable, and
	// ceilingError why it is unavailable, fit to show.
	ceiling, ceilingError  string
	proxyOff, inventoryOff bool // the halves its hello said it doesn't run (streams.go)
	// moves says its hello said it can move (moves.go); moving, that the
	// hub asked it to.
	moves  bool
	moving atomic.Bool
	// instance and connection are its hello's: they order it against
	// another connection of the same agent process (claims.go).
	instance   string
	connection uint64
	// ca is the DER of the certificates the agent sent for its API
	// server. Not a CertPool: a pool with its index and the parsed
	// certificate cost the hub 0.8 KiB more per idle agent, so a pool is
	// made for each TLS handshake with the API server, which costs far
	// more (apiTLSConfig).
	ca        [][]byte
	since     time.Time
	lastHeard atomic.Int64 // unix nanoseconds of the last message from the agent
	// inventoryOpen is true while the agent's inventory stream is open.
	inventoryOpen atomic.Bool
	// streams and ownStreams count the streams to the API server open now
	// (dial), for people's requests and for the hub's own; ownDials the
	// hub's own dials under way, waiting for their turn or not
	// (turns.go).
	streams, ownStreams, ownDials atomic.Int64
	// probeUnconnected is true when the last probe ended before it had
	// a connection to the API server (probe).
	probeUnconnected atomic.Bool

	writeMu sync.Mutex // guards writes to ctl

	mu sync.Mutex // guards the following
	// saAuth is Authorization for the agent's service account token,
	// "Bearer <token>": made once per token, not once per request (a
	// token is about a kilobyte).
	saAuth string
	// transport goes to the API server, through the tunnel, TLS checked
	// against ca: people's requests, except upgrades. It is made on first
	// use: an idle agent's hub holds no transport (about 1 KiB each, and
	// more once used; decision 012).
	transport *http.Transport
	// upgrades is transport without a pool, for upgrade requests: each gets
	// a connection of its own, and one whose upgrade failed is closed, not
	// reused. (Setting Close on the request would instead send
	// "Connection: close, Upgrade", which the API server takes for no
	// upgrade.) Made on first use too.
	upgrades *http.Transport
	// ownTransport sends the hub's own requests: the probes (decision 019)
	// and access reviews. A pool of its own, so that a person's request
	// never takes one of its kept connections, whose streams are not the
	// people's to use (streams.go). Made on first use, and let go when it
	// holds no connection (hubTransportDone); ownUsers counts the requests
	// under way through it.
	ownTransport *http.Transport
	ownUsers     int
	pingSeq      uint64 // the last ping sent, and when, for the round-trip metric
	pingAt       time.Time

	closeOnce sync.Once
	done      chan struct{} // closed when the connection is ending
	why       error         // why it ended; set before done is closed
	// leaving is why goAway sends the agent away, once it has begun: the
	// end it brings (the agent closing, as asked) is recorded as that.
	leaving atomic.Pointer[error]

	// ctx is done once the connection is ending (end), as done is: the
	// probes stop, and what people's side keeps of it is dropped.
	ctx    context.Context
	cancel context.CancelFunc
	// Set by serveConn before the control stream is read, used by finish.
	heartbeat, probes *timerLoop

	ctlMu   sync.Mutex // guards the following
	reading bool       // a readControl goroutine is running
	pending bool       // the control stream had something since it looked
}

// serveConn registers c as its cluster's agent (taking over from any other)
// and starts its timers. It reports whether it did; if it did, the
// connection is finished, and h.conns told, by the goroutine that reads
// the end of its control stream (readControl).
func (h *Hub) serveConn(c *agentConn) bool {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		h.admission.giveBack()
		c.welcome()
		c.goAway(goAwayShutdown, h.spreadDelay()) // it came as the hub closed
		return false
	}
	// The list may have changed since the upgrade checked the token
	// (AgentsChanged dropped the agents registered then, not this one):
	// check again, under h.mu, against the list in force now.
	if !c.admitted() {
		if _, listed := h.cfg.Agents.Lookup(c.name); !listed && h.agents[c.name] == nil {
			// Removed since the upgrade: the CA its hello recorded
			// stays with no cluster (AgentsChanged cleared it before).
			delete(h.lastCA, c.name)
		}
		h.mu.Unlock()
		h.admission.giveBack()
		h.metrics.connects.WithLabelValues("unauthorized").Inc()
		h.logRefusal(c.name, c.remote, "whose token or CA the agents list no longer admits")
		c.send(protocol.Message{Type: protocol.TypeRefused, Status: http.StatusUnauthorized, Error: "the hub's agents list no longer admits this agent"})
		return false
	}
	prev := h.agents[c.name]
	h.agents[c.name] = c
	if prev != nil && prev.moving.Load() && c.instance != "" && c.instance == prev.instance && c.connection > prev.connection {
		// The agent this hub asked to move came back here (the load
		// balancer's pick): its move, not a takeover.
		h.inventory.End(c.name)
		h.retireConnLocked(prev)
		prev = nil
	} else if prev == nil {
		// A takeover keeps the cluster's one slot: the gauge counts
		// clusters with an agent, never two for one.
		h.metrics.connected.Inc()
	} else {
		// The connection taken over may still be sending its inventory:
		// from here on only this one's (opened once it is welcomed)
		// counts. Under h.mu, so that a third connection taking over
		// from this one ends this one's, never its own.
		h.inventory.End(c.name)
	}
	h.mu.Unlock()
	// Welcomed once registered, before the connection it takes over from
	// is told to go. If the welcome can't be sent, the session ends, and
	// the control stream's end finishes the connection below.
	if err := c.welcome(); err != nil {
		c.end(fmt.Errorf("welcome: %w", err))
	}
	h.admission.welcomed(h.clock.Now())
	if prev != nil {
		h.metrics.takeovers.Inc()
		h.log.Warn("An agent was taken over by another agent with the same name and token",
			"agent", c.name, "remote", c.remote, "previousRemote", prev.remote)
		// Told on its own: the agent taken over is often gone without a
		// word (its pod restarted), and its goaway then waits out the
		// linger, which this connection's setup must not wait for.
		// Counted in h.conns, as this connection is already, so that
		// Close waits for it too.
		h.conns.Add(1)
		go func() {
			defer h.conns.Done()
			prev.goAway(goAwayTakeover, 0)
		}()
	}
	h.events.changed(c.name)
	h.metrics.connects.WithLabelValues("accepted").Inc()
	h.log.Info(fmt.Sprintf("The agent of %q connected (Tether %s)", c.name, c.agentVersion), "agent", c.name, "remote", c.remote)

	// An idle agent costs the hub one goroutine, the session's read loop.
	// The control stream is read by a goroutine started when something
	// arrives on it, which ends when there is nothing more to read
	// (decision 012); the inventory stream, while the agent has it open,
	// has one of its own. Heartbeats and probes run on timers
	// (docs/decisions/008-performance.md).
	c.sess.Handle(c.agentStream)
	c.heartbeat = c.startHeartbeat()
	c.probes = h.startProbes(c.ctx, c)
	if !tunnel.OnReadable(c.ctl, c.controlReadable) {
		go h.finish(c, errors.New("the control stream is not a tunnel stream"))
	}
	return true
}

// finish takes c down once its control stream has ended, whoever ended it
// (every end closes the session, which ends the control stream), and
// unregisters it.
func (h *Hub) finish(c *agentConn, err error) {
	defer h.conns.Done()
	c.end(err)
	c.cancel()
	c.heartbeat.Stop()
	c.probes.Stop()
	c.sess.Close() // and waits for agentStream
	c.closeIdleConnections()

	h.mu.Lock()
	delete(h.retired, c)
	current := h.agents[c.name] == c
	if current {
		delete(h.agents, c.name)
		h.metrics.connected.Dec()
		if _, listed := h.cfg.Agents.Lookup(c.name); !listed {
			// Removed from the list while connected: AgentsChanged forgot
			// the inventory before it sent the agent away, and an
			// inventory stream the agent opened meanwhile may have
			// filled it again. Its session is closed (agentStream is
			// done), so nothing writes it from here on.
			h.inventory.Forget(c.name)
		}
	}
	h.mu.Unlock()
	h.log.Info(fmt.Sprintf("The agent of %q disconnected", c.name), "agent", c.name, "remote", c.remote, "why", c.why)
	if current {
		h.setStatus(c.name, c.agentVersion, notConnected(time.Unix(0, c.lastHeard.Load())))
		// The pages showed the connection (clusterLocked), even where the
		// status recorded doesn't change: an agent that leaves before its
		// first probe answers leaves "not connected" as it was.
		h.events.changed(c.name)
	}
}

// end marks the connection as ending, for the reason err, and closes its
// session. Only the first reason counts.
func (c *agentConn) end(err error) { c.endClosing(err, 1000, "") }

// endClosing is end with a WebSocket close code and reason for the peer
// (1000 and "" send none). The reason is recorded before the session
// closes, so it wins over the errors the closing causes.
func (c *agentConn) endClosing(err error, code int, reason string) {
	c.closeOnce.Do(func() {
		c.why = err
		if l := c.leaving.Load(); l != nil {
			c.why = *l
		}
		close(c.done)
		if c.cancel != nil {
			c.cancel()
		}
	})
	if code == 1000 && reason == "" {
		c.sess.Close()
		return
	}
	c.sess.CloseWithReason(code, reason)
}

func (c *agentConn) send(m protocol.Message) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	c.ctl.SetWriteDeadline(time.Now().Add(5 * time.Second))
	return protocol.Write(c.ctl, m)
}

// goAway tells the agent why the hub is closing its connection, waits a
// little for the agent to close first, then closes it. After a shutdown the
// agent waits delay before it connects again.
func (c *agentConn) goAway(kind goAwayKind, delay time.Duration) {
	g := c.sendGoAway(kind, delay)
	if g.linger {
		expired := make(chan struct{})
		t := c.hub.clock.AfterFunc(goAwayLinger, func() { close(expired) })
		g.wait(expired)
		t.Stop()
	}
	g.close()
}

// sentGoAway is a goaway sent to an agent, its connection still open.
type sentGoAway struct {
	c      *agentConn
	linger bool // wait for the agent to close first
	code   int
	why    error
	reason string
}

// sendGoAway tells the agent why the hub is closing its connection.
func (c *agentConn) sendGoAway(kind goAwayKind, delay time.Duration) sentGoAway {
	m := protocol.Message{Type: protocol.TypeGoAway, Reason: protocol.ReasonShutdown, ReconnectAfterMillis: delay.Milliseconds()}
	code, why := closeShutdown, errors.New("the hub is shutting down")
	switch kind {
	case goAwayTakeover:
		m = protocol.Message{Type: protocol.TypeGoAway, Reason: protocol.ReasonTakeover}
		code, why = closeTakeover, errors.New("taken over by another agent")
	case goAwayRemoved:
		m = protocol.Message{Type: protocol.TypeGoAway, Reason: protocol.ReasonRemoved}
		code, why = closeRemoved, errors.New("the agents list no longer admits it")
	}
	c.leaving.Store(&why)
	// An agent this hub asked to move keeps this connection until the hub
	// closes it, and once it has moved ignores a goaway here: waiting for
	// it to close would wait the whole linger for nothing.
	linger := c.send(m) == nil && !c.moving.Load()
	return sentGoAway{c: c, linger: linger, code: code, why: why, reason: m.Reason}
}

// wait lets the agent read the goaway and close first, until expired.
// Closing the TCP connection while the agent's last bytes (a pong, a
// window update) wait unread makes the kernel send a reset, and the reset
// can take the goaway with it: the agent would then take its name back
// instead of stopping.
func (g sentGoAway) wait(expired <-chan struct{}) {
	select {
	case <-g.c.sess.Done():
	case <-expired:
	}
}

// close closes the connection, saying why.
func (g sentGoAway) close() { g.c.endClosing(g.why, g.code, g.reason) }

// goAwayLinger bounds the wait for an agent to close after a goaway.
const goAwayLinger = 2 * time.Second

// controlReadable is the control stream's onReadable: it starts a
// readControl goroutine unless one is running. It is called from the
// session's read loop and must not block.
func (c *agentConn) controlReadable() {
	c.ctlMu.Lock()
	defer c.ctlMu.Unlock()
	if c.reading {
		c.pending = true
		return
	}
	c.reading = true
	go c.readControl()
}

// readControl handles what the agent says on the control stream, until
// nothing more is there to read: then it returns, and the next message
// starts another. The one that reads the stream's end finishes the
// connection, and no other starts after it.
func (c *agentConn) readControl() {
	for {
		if !tunnel.Ready(c.ctl) {
			c.ctlMu.Lock()
			if !c.pending {
				c.reading = false
				c.ctlMu.Unlock()
				return
			}
			c.pending = false
			c.ctlMu.Unlock()
			continue
		}
		m, err := protocol.Read(c.ctl)
		if err == nil {
			err = c.handleControl(m)
		} else {
			err = fmt.Errorf("control stream: %w", err)
		}
		if err != nil {
			c.hub.finish(c, err)
			return
		}
	}
}

// handleControl handles one message from the agent. An error ends the
// connection.
func (c *agentConn) handleControl(m protocol.Message) error {
	now := c.hub.clock.Now()
	c.lastHeard.Store(now.UnixNano())
	switch m.Type {
	case protocol.TypePong:
		if sent := c.pingSent(m.Seq); !sent.IsZero() {
			c.hub.metrics.heartbeatRTT.Observe(now.Sub(sent).Seconds())
		}
	case protocol.TypeToken:
		c.mu.Lock()
		c.saAuth = authorization(m.ServiceAccountToken)
		c.mu.Unlock()
		c.hub.log.Info("An agent sent a new service account token", "agent", c.name)
	case protocol.TypeBye:
		return errors.New("the agent is stopping")
	}
	return nil
}

// agentStream serves a stream the agent opened. The only one defined is
// the inventory stream; the agent opens it once per connection, and any
// other is closed at once.
func (c *agentConn) agentStream(st net.Conn) {
	defer st.Close()
	if !c.inventoryOpen.CompareAndSwap(false, true) {
		return
	}
	defer c.inventoryOpen.Store(false)
	c.hub.receiveInventory(c, st)
}

// startHeartbeat pings the agent every interval, and ends the connection
// when nothing has come from it for two intervals and a second. One timer
// does both: it fires for the next ping or when that much silence would
// have passed since the agent was last heard, whichever comes first, not on
// a tick. (Two timers cost the hub 0.3 KiB more per idle agent.)
func (c *agentConn) startHeartbeat() *timerLoop {
	clk := c.hub.clock
	interval := c.hub.cfg.Heartbeat
	limit := 2*interval + time.Second
	var seq uint64
	nextPing := clk.Now().Add(interval)
	return startTimerLoop(clk, interval, func() (time.Duration, bool) {
		quiet := clk.Now().Sub(time.Unix(0, c.lastHeard.Load()))
		if quiet > limit {
			c.endClosing(fmt.Errorf("nothing from the agent in %d s", int(limit.Round(time.Second).Seconds())), closeSilent, "no heartbeat")
			return 0, false
		}
		if !clk.Now().Before(nextPing) {
			seq++
			c.notePing(seq)
			if err := c.send(protocol.Message{Type: protocol.TypePing, Seq: seq}); err != nil {
				c.end(fmt.Errorf("heartbeat: %w", err))
				return 0, false
			}
			nextPing = clk.Now().Add(interval)
		}
		// The send may have taken a while: measure the silence again.
		now := clk.Now()
		quiet = now.Sub(time.Unix(0, c.lastHeard.Load()))
		return max(min(nextPing.Sub(now), limit-quiet+time.Millisecond), time.Millisecond), true
	})
}

func (c *agentConn) notePing(seq uint64) {
	c.mu.Lock()
	c.pingSeq, c.pingAt = seq, c.hub.clock.Now()
	c.mu.Unlock()
}

func (c *agentConn) pingSent(seq uint64) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if seq != c.pingSeq {
		return time.Time{}
	}
	return c.pingAt
}

// Dial opens a stream to the cluster's API server. The agent dials it; the
// first message on the stream says whether it could. Every stream opened is
// counted, and counted again when closed, whichever way it ends. Past the
// cluster's MaxStreamsPerAgent it opens none for a person's request
// (*StreamLimitError); the hub's own (OwnRequest) have reservedStreams more.
func (c *agentConn) dial(ctx context.Context) (net.Conn, error) {
	count, err := c.takeStream(ctx.Value(ownKey{}) != nil)
	if err != nil {
		return nil, err
	}
	raw, err := c.sess.Open(ctx)
	if err != nil {
		count.Add(-1)
		return nil, fmt.Errorf("the agent's tunnel: %w", err)
	}
	c.hub.metrics.streamsOpened.Inc()
	st := &countingConn{Conn: raw, m: c.hub.metrics, release: func() { count.Add(-1) }}
	if err := c.markOwn(raw); err != nil {
		st.Close()
		return nil, err
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(30 * time.Second)
	}
	st.SetReadDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { st.SetReadDeadline(time.Now()) })
	m, err := protocol.Read(raw)
	stop()
	if err != nil {
		st.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("the agent didn't answer the dial: %w", err)
	}
	if m.Type != protocol.TypeDial || m.Error != "" {
		st.Close()
		if m.Error == "" {
			return nil, fmt.Errorf("the agent answered a dial with a %s message", m.Type)
		}
		return nil, agentDialError(m.Error)
	}
	st.SetReadDeadline(time.Time{})
	return st, nil
}

// agentDialError is the agent's own account of why it couldn't dial its
// API server: it says all there is to say, if the agent is honest. It is
// shown to everyone who sees the cluster, so its text says whose words
// they are, cut and without control characters: `the agent says: "…"`.
type agentDialError string

func (e agentDialError) Error() string {
	return "the agent says: " + strconv.Quote(ShownText(string(e), maxAgentWords))
}

// countingConn counts the bytes a stream to an API server carries, and its
// close.
type countingConn struct {
	net.Conn
	m         *metrics
	release   func() // gives the stream back to its connection's count
	closeOnce sync.Once
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.m.fromCluster.Add(float64(n))
	return n, err
}

func (c *countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.m.toCluster.Add(float64(n))
	return n, err
}

// CloseWrite half-closes the stream: the agent shuts the write side of its
// connection to the API server and goes on relaying the answer.
func (c *countingConn) CloseWrite() error {
	return c.Conn.(interface{ CloseWrite() error }).CloseWrite()
}

func (c *countingConn) Close() error {
	err := c.Conn.Close()
	c.closeOnce.Do(func() {
		c.m.streamsClosed.Inc()
		c.release()
	})
	return err
}

// roundTrip sends a request to the cluster's API server through net/http's
// transport: the hub's own through theirs, upgrades through one that keeps
// no connection, people's other requests through their pool.
func (c *agentConn) roundTrip(r *http.Request) (*http.Response, error) {
	if r.Context().Value(ownKey{}) != nil {
		t, done := c.hubTransport()
		defer done() // an answer's open stream keeps t (hubTransportDone)
		return t.RoundTrip(r)
	}
	return c.apiTransport(r.Header.Get("Upgrade") != "").RoundTrip(r)
}

// apiTransport is the transport for people's requests: upgrades for upgrade
// requests, transport for the rest. Each is made on first use.
func (c *agentConn) apiTransport(upgrade bool) *http.Transport {
	c.mu.Lock()
	defer c.mu.Unlock()
	if upgrade {
		if c.upgrades == nil {
			c.upgrades = c.newTransport()
			c.upgrades.MaxIdleConnsPerHost = -1 // never keep one
		}
		return c.upgrades
	}
	if c.transport == nil {
		c.transport = c.newTransport()
	}
	return c.transport
}

// closeIdleConnections closes the connections the transports keep.
func (c *agentConn) closeIdleConnections() {
	c.mu.Lock()
	t, u, ot := c.transport, c.upgrades, c.ownTransport
	c.mu.Unlock()
	for _, t := range []*http.Transport{t, u, ot} {
		if t != nil {
			t.CloseIdleConnections()
		}
	}
}

// newTransport makes an HTTP transport to the cluster's API server: each
// connection is a stream through the tunnel with TLS inside it (dialAPI).
// The TLS config is made for each connection, not kept with the transport:
// every agent has the probes' transport, and one whose API server doesn't
// answer would hold it for nothing.
func (c *agentConn) newTransport() *http.Transport {
	return NewAPITransport(func(ctx context.Context) (net.Conn, error) {
		return c.dialAPI(ctx, c.apiTLSConfig())
	}, c.hub.cfg.IdleTimeout)
}

// NewAPITransport makes an HTTP transport to an API server whose
// connections dial makes, TLS done, closing those idle for idleTimeout: the
// hub's to its agents' clusters, and another replica's through this one's
// agent (internal/peers).
//
// net/http's transport, not a client of the hub's own (decision 016): its
// read loop watches every idle connection and closes one on which anything
// arrives, so that an answer no one asked for doesn't reach the next
// request, perhaps another person's.
func NewAPITransport(dial func(context.Context) (net.Conn, error), idleTimeout time.Duration) *http.Transport {
	return &http.Transport{
		DialTLSContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dial(ctx)
		},
		MaxIdleConnsPerHost: maxIdleAPIConns,
		IdleConnTimeout:     idleTimeout,
		// HTTP/1.1 only: the TLS config offers no ALPN, and the transport
		// tries no HTTP/2 over a DialTLSContext unless forced. Over the
		// tunnel HTTP/2 was slower (decision 016: +0.87 ms on a small GET
		// against +0.72, lists slower, its flow control on top of the
		// tunnel's), and one connection would carry many people's requests,
		// where MaxStreamsPerAgent counts a stream per request.
		ForceAttemptHTTP2: false,
		// Pass the client's Accept-Encoding through as it is. Otherwise a
		// client that asks for no compression gets the API server's gzip
		// undone by the hub: the API server compresses, the hub
		// decompresses, and a 21 MB list took 7 times as long as direct
		// (docs/decisions/008-performance.md).
		DisableCompression: true,
		// Redirects are never followed: the transport doesn't, and callers
		// use no http.Client that would. The TLS handshake's bound is
		// dialAPI's (apiTLSHandshakeTimeout): TLSHandshakeTimeout applies
		// only to TLS the transport does itself.
	}
}

// maxIdleAPIConns is how many idle connections to its API server the hub
// keeps per cluster, in each pool.
const maxIdleAPIConns = 32
