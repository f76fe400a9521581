package agent

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tetherhq/tether/internal/protocol"
	"github.com/tetherhq/tether/internal/tunnel"
	"github.com/tetherhq/tether/internal/version"
)

// result is how one connection attempt ended.
type result struct {
	connected bool          // the hub welcomed the agent before it ended
	err       error         // why it ended, for the log
	wait      time.Duration // how long to wait before the next attempt; < 0 means backoff
	goodbye   bool          // the agent ends a working connection: it tells the hub so first
	// moved is the connection the hub asked the agent to move from
	// (protocol.ReasonMove): it goes on serving its streams, and the
	// agent connects again at once.
	moved *conn
}

func failed(err error) result { return result{err: err, wait: -1} }

// connect makes one connection to the hub and serves it until it ends.
func (a *Agent) connect(ctx context.Context) (res result) {
	sa, err := a.cfg.ReadServiceAccount()
	if err != nil {
		return failed(err)
	}
	hctx, cancel := context.WithTimeout(ctx, a.cfg.HandshakeTimeout)
	defer cancel()
	ceil := a.checkCeiling(hctx, sa)
	a.logCeiling(ceil)
	// A move while the connection moved from still serves; once it has
	// ended, the agent comes back as after any disconnect.
	move := a.draining.Load() > 0
	sess, resp, err := tunnel.Dial(hctx, a.agentURL(), tunnel.DialOptions{Header: a.header(move), TLSConfig: a.cfg.TLSConfig, Proxy: a.cfg.Proxy, DialContext: a.cfg.DialHub}, a.cfg.Tunnel)
	if err != nil {
		res := a.dialFailed(resp, err)
		if move && res.wait >= 0 && res.err != nil {
			// A replica at its share turns moves away (503, Retry-After
			// 1) for the load balancer to pick another: no outage.
			res.err = fmt.Errorf("%w, while moving: the connection it moves from still serves", res.err)
		}
		return res
	}
	defer func() {
		// A connection moved from lives on: drain closes it.
		if res.moved == nil {
			sess.Close()
		}
	}()

	ctl, err := sess.Open(hctx)
	if err != nil {
		return failed(fmt.Errorf("open the control stream: %w", err))
	}
	ctl.SetDeadline(time.Now().Add(a.cfg.HandshakeTimeout))
	hello := protocol.Message{
		Type:                protocol.TypeHello,
		Protocol:            protocol.Version,
		AgentVersion:        version.Version,
		CACert:              string(sa.CACert),
		ServiceAccountToken: sa.Token,
		APIServer:           a.cfg.APIServer,
		Ceiling:             ceil.state,
		CeilingError:        ceil.why,
		ProxyOff:            a.cfg.ProxyOff,
		InventoryOff:        a.cfg.InventoryOff,
		Moves:               true,
		Move:                move,
		Instance:            a.instance,
		Connection:          a.connections.Add(1),
	}
	if err := protocol.Write(ctl, hello); err != nil {
		return failed(err)
	}
	answer, err := protocol.Read(ctl)
	if err != nil {
		return failed(fmt.Errorf("no welcome from the hub: %w", err))
	}
	switch answer.Type {
	case protocol.TypeWelcome:
	case protocol.TypeRefused:
		return a.refusedAfterHello(answer)
	default:
		return failed(fmt.Errorf("the hub answered the hello with a %s message", answer.Type))
	}
	ctl.SetDeadline(time.Time{})

	if hello.Move {
		a.log.Info("Moved to another hub replica", "hub", a.hub, "hubVersion", answer.HubVersion)
	} else {
		a.log.Info(fmt.Sprintf("Connected to %s as %q", a.hub, a.cfg.Name), "hubVersion", answer.HubVersion)
	}
	a.live.Add(1)
	c := &conn{
		a:         a,
		sess:      sess,
		ctl:       ctl,
		heartbeat: time.Duration(answer.HeartbeatMillis) * time.Millisecond,
		token:     sa.Token,
		ca:        sa.CACert,
		ceiling:   ceil,
	}
	res = c.serve(ctx)
	res.connected = true
	if res.moved != nil {
		// The connection lives on (drain) until the hub closes it.
		a.draining.Add(1)
	} else {
		a.live.Add(-1)
	}
	return res
}

func (a *Agent) agentURL() string {
	u := *a.cfg.HubURL
	if u.Scheme == "https" {
		u.Scheme = "wss"
	} else {
		u.Scheme = "ws"
	}
	u.Path += "/" + protocol.AgentPath
	return u.String()
}

// header is the upgrade's: the agent's token and name, and whether it is
// moving (protocol.MoveHeader).
func (a *Agent) header(move bool) http.Header {
	h := http.Header{}
	h.Set("Authorization", "Bearer "+a.cfg.Token)
	h.Set(protocol.AgentHeader, a.cfg.Name)
	if move {
		h.Set(protocol.MoveHeader, "1")
	}
	return h
}

// dialFailed sorts a failed upgrade into a refusal (stop) or a failure to
// connect (try again), honouring Retry-After on a 503 or 429.
func (a *Agent) dialFailed(resp *http.Response, err error) result {
	if resp == nil {
		err = plainDialError(err)
		var unknownCA x509.UnknownAuthorityError
		switch {
		case !errors.As(err, &unknownCA):
		case a.cfg.HubCAFile == "":
			err = fmt.Errorf("%w (a hub whose certificate comes from a private CA needs that CA in TETHER_HUB_CA)", err)
		default:
			err = fmt.Errorf("%w (TETHER_HUB_CA %s doesn't hold the CA that signed it)", err, a.cfg.HubCAFile)
		}
		return failed(err)
	}
	switch resp.StatusCode {
	case http.StatusUnauthorized:
		return result{err: &RefusedError{Hub: a.hub, Reason: reasonUnknown}}
	case http.StatusForbidden:
		return result{err: &RefusedError{Hub: a.hub, Reason: reasonNoAgents}}
	case http.StatusSwitchingProtocols:
		return failed(err)
	}
	why := fmt.Errorf("it answered %s", resp.Status)
	if loc := resp.Header.Get("Location"); loc != "" {
		why = fmt.Errorf("it answered %s, redirecting to %s", resp.Status, loc)
	}
	if resp.StatusCode == http.StatusNotFound {
		why = fmt.Errorf("it answered %s (is TETHER_HUB_URL the hub's address as its TETHER_PUBLIC_URL gives it, base path included?)", resp.Status)
	}
	res := failed(why)
	if resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusTooManyRequests {
		if d, ok := retryAfter(resp.Header.Get("Retry-After")); ok {
			res.wait = d
		}
	}
	return res
}

// maxRetryAfter caps how long a hub's Retry-After can hold an agent back: a
// typo, or a proxy that means hours, must not keep a cluster away for days.
const maxRetryAfter = 10 * time.Minute

// retryAfter reads a Retry-After value in seconds (the only form a hub
// sends), from 1 s, the shortest backoff, so that a proxy answering every
// attempt with 0 makes no loop, to maxRetryAfter. Anything else, an HTTP
// date included, is not ok, and the agent backs off as usual.
func retryAfter(v string) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" || len(v) > 10 || strings.TrimLeft(v, "0123456789") != "" {
		return 0, false
	}
	s, err := strconv.Atoi(v)
	if err != nil {
		return 0, false
	}
	// Compare before multiplying: 9999999999 s overflows a Duration.
	if s > int(maxRetryAfter/time.Second) {
		return maxRetryAfter, true
	}
	return time.Duration(max(s, 1)) * time.Second, true
}

// refusedAfterHello sorts the hub's refusal of the hello as dialFailed
// sorts an upgrade's: 401 (a CA other than the one the list pins), 403 and
// a takeover stop the agent; anything else, such as a hello this hub can't
// take, is a failure to connect, tried again.
func (a *Agent) refusedAfterHello(m protocol.Message) result {
	var reason string
	switch m.Status {
	case http.StatusUnauthorized:
		reason = reasonUnknown
	case http.StatusForbidden:
		reason = reasonNoAgents
	case http.StatusConflict:
		reason = reasonTakeover
	default:
		return failed(fmt.Errorf("it refused the hello with %d: %q", m.Status, m.Error))
	}
	if m.Error != "" {
		// After the hello the hub knows the name and token: its own words
		// (a CA that isn't the pinned one, an entry gone meanwhile) are the
		// reason, and the status's stock sentence would contradict them.
		// Text with control characters stays quoted, as it was.
		why := strings.TrimSuffix(m.Error, ".")
		if q := strconv.Quote(why); q != `"`+why+`"` {
			why = q
		}
		reason = why + "."
	}
	return result{err: &RefusedError{Hub: a.hub, Reason: reason}}
}

// conn serves one welcomed connection.
type conn struct {
	a         *Agent
	sess      *tunnel.Session
	ctl       net.Conn
	heartbeat time.Duration

	writeMu sync.Mutex // guards writes to ctl

	ca      []byte  // the ca.crt the hello carried
	ceiling ceiling // what the hello said of the ceiling

	mu        sync.Mutex // guards the following
	lastHeard time.Time
	token     string // the service account token the hub has now

	// The session's loops (readControl, watchSilence) serve it as long as
	// it lives, after a move too; the first way it ends goes on ended.
	loops  sync.WaitGroup
	ended  chan result
	cancel context.CancelCauseFunc // stops the loops; the session's end

	endMu sync.Mutex // guards moved
	moved bool       // the hub asked the agent to move from this connection
}

func (c *conn) send(m protocol.Message) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	c.ctl.SetWriteDeadline(time.Now().Add(10 * time.Second))
	return protocol.Write(c.ctl, m)
}

// serve runs the connection's loops until one ends it, and waits for all.
// A move ends only its duties as the agent's connection (the token, the
// ceiling, the inventory), which pass to the next; the session and its
// loops go on, and the caller drains it.
func (c *conn) serve(parent context.Context) result {
	sctx, scancel := context.WithCancelCause(parent)
	c.cancel = scancel
	c.ended = make(chan result, 8)

	c.mu.Lock()
	c.lastHeard = time.Now()
	c.mu.Unlock()

	// The control stream alone decides how the connection ended: when the
	// session closes, a goaway may still wait in its buffer, and it says
	// more than the accept loop's "session closed".
	// Every stream the hub opens is relayed in a goroutine of its own, which
	// the session's Close waits for.
	c.sess.Handle(func(st net.Conn) { c.a.relay(sctx, st) })
	c.loops.Add(2)
	go func() { defer c.loops.Done(); c.readControl() }()
	go func() { defer c.loops.Done(); c.watchSilence(sctx) }()

	ctx, cancel := context.WithCancel(sctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); c.watchToken(ctx) }()
	if c.a.cfg.Inventory != nil {
		wg.Add(1)
		go func() { defer wg.Done(); c.streamInventory(ctx) }()
	}
	if c.a.cfg.StrictMode {
		wg.Add(1)
		go func() { defer wg.Done(); c.recheckCeiling(ctx, c.endDuty) }()
	}

	var r result
	select {
	case r = <-c.ended:
		if r.moved != nil {
			// The inventory stream ends here, so that the next
			// connection's can begin: the watcher streams to one at
			// a time.
			cancel()
			wg.Wait()
			return r
		}
		if r.goodbye {
			c.goodbye("agent connecting again")
		}
	case <-parent.Done():
		// Stopping (SIGTERM).
		c.goodbye("agent stopping")
		r = result{err: parent.Err(), wait: -1}
	}
	c.close()
	cancel()
	wg.Wait()
	return r
}

// close ends the session and waits for its loops and relays.
func (c *conn) close() {
	c.cancel(nil)
	c.sess.Close()
	c.loops.Wait()
}

// end ends the connection for r's reason; a move (r.moved) ends only its
// duties as the agent's connection. The first reason counts, and after a
// move the first after it.
func (c *conn) end(r result) {
	c.endMu.Lock()
	defer c.endMu.Unlock()
	if r.moved != nil {
		c.moved = true
	}
	select {
	case c.ended <- r:
	default:
	}
	if r.moved == nil {
		c.cancel(r.err)
	}
}

// endDuty is end for the duties that pass to the next connection on a
// move: after one, they end no connection.
func (c *conn) endDuty(r result) {
	c.endMu.Lock()
	moved := c.moved
	c.endMu.Unlock()
	if !moved {
		c.end(r)
	}
}

func (c *conn) hasMoved() bool {
	c.endMu.Lock()
	defer c.endMu.Unlock()
	return c.moved
}

// goodbye tells the hub the agent is leaving, so the hub logs a clean
// disconnect, and sees it gone before the agent connects again, not a
// takeover.
func (c *conn) goodbye(reason string) {
	c.send(protocol.Message{Type: protocol.TypeBye})
	c.sess.CloseWithReason(1000, reason)
}

// readControl handles what the hub says on the control stream, until it
// ends.
func (c *conn) readControl() {
	for {
		m, err := protocol.Read(c.ctl)
		if err != nil {
			c.end(result{err: fmt.Errorf("the connection ended: %w", err), wait: -1})
			return
		}
		c.mu.Lock()
		c.lastHeard = time.Now()
		c.mu.Unlock()
		switch m.Type {
		case protocol.TypePing:
			if err := c.send(protocol.Message{Type: protocol.TypePong, Seq: m.Seq}); err != nil {
				c.end(result{err: err, wait: -1})
				return
			}
		case protocol.TypeGoAway:
			if r, ok := c.goAway(m); ok {
				c.end(r)
				if r.moved == nil {
					return
				}
			}
		}
	}
}

// goAway sorts a goaway into how the connection ends; not ok when it
// doesn't. After a move only a takeover counts: the hub closes the
// connection moved from when its streams are done, and a shutdown or
// another move says nothing new.
func (c *conn) goAway(m protocol.Message) (result, bool) {
	moved := c.hasMoved()
	switch {
	case m.Reason == protocol.ReasonTakeover:
		return result{err: &RefusedError{Hub: c.a.hub, Reason: reasonTakeover}}, true
	case moved:
		return result{}, false
	case m.Reason == protocol.ReasonMove:
		return result{moved: c}, true
	case m.Reason == protocol.ReasonShutdown:
		return result{err: errors.New("the hub is shutting down"), wait: time.Duration(m.ReconnectAfterMillis) * time.Millisecond}, true
	default:
		return result{err: fmt.Errorf("the hub closed the connection: %q", m.Reason), wait: -1}, true
	}
}

// watchSilence ends the connection when the hub has been silent for two
// heartbeats and a second: the network dropped it without a word.
func (c *conn) watchSilence(ctx context.Context) {
	silence := 2*c.heartbeat + time.Second
	check := time.NewTicker(min(c.heartbeat/4, time.Second))
	defer check.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-check.C:
			c.mu.Lock()
			quiet := time.Since(c.lastHeard)
			c.mu.Unlock()
			if quiet > silence {
				err := fmt.Errorf("Nothing from the hub in %d s", int(silence.Round(time.Second).Seconds()))
				c.a.log.Warn(err.Error())
				c.end(result{err: err, wait: -1})
				return
			}
		}
	}
}

// watchToken reads the service account again every reread interval.
func (c *conn) watchToken(ctx context.Context) {
	reread := time.NewTicker(c.a.cfg.TokenReread)
	defer reread.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-reread.C:
			if err := c.reread(); err != nil {
				c.endDuty(result{err: err, wait: -1, goodbye: true})
				return
			}
		}
	}
}

// reread sends the hub a changed service account token. A changed ca.crt
// returns an error, and the agent connects again, as after any close: the
// hub checks the API server against the CA in the hello, and a cluster
// whose CA rotated would otherwise be unreachable through the hub until the
// agent restarted.
func (c *conn) reread() error {
	sa, err := c.a.cfg.ReadServiceAccount()
	if err != nil {
		c.a.log.Warn("Can't read the service account again; the hub keeps the last token and CA", "err", err)
		return nil
	}
	if !bytes.Equal(sa.CACert, c.ca) {
		return errors.New("the cluster's CA certificate (ca.crt) changed, and the hub must have the new one")
	}
	c.mu.Lock()
	changed := sa.Token != c.token
	c.mu.Unlock()
	if !changed {
		return nil
	}
	if err := c.send(protocol.Message{Type: protocol.TypeToken, ServiceAccountToken: sa.Token}); err != nil {
		return nil // the connection is ending; the next hello carries the new token
	}
	c.mu.Lock()
	c.token = sa.Token
	c.mu.Unlock()
	c.a.log.Info("Sent the hub the service account's new token")
	return nil
}

// plainDialError strips the WebSocket and HTTP layers' wrapping from a
// network error, leaving what people can act on ("dial tcp 10.0.0.5:443:
// connect: connection refused", "tls: failed to verify certificate: ...").
func plainDialError(err error) error {
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		return opErr
	}
	var urlErr *url.Error
	if errors.As(err, &urlErr) {
		return urlErr.Err
	}
	return err
}
