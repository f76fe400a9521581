package hub

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/hostport"
	"github.com/tetherhq/tether/internal/listfile"
	"github.com/tetherhq/tether/internal/protocol"
	"github.com/tetherhq/tether/internal/tunnel"
	"github.com/tetherhq/tether/internal/version"
)

// serveAgent admits an agent: it checks the name and token on the upgrade
// request, upgrades, reads the hello, and registers the connection, which
// h.conns counts until it is finished.
func (h *Hub) serveAgent(w http.ResponseWriter, r *http.Request, own bool) {
	name := r.Header.Get(protocol.AgentHeader)
	if h.cfg.Agents == nil || h.cfg.OwnAgentsOnly && !own {
		h.metrics.connects.WithLabelValues("no_agents_list").Inc()
		http.Error(w, "This hub takes no agents: it has no agents list (TETHER_FLEET_AGENTS or TETHER_FLEET_AGENTS_FILE).", http.StatusForbidden)
		return
	}
	token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	entry, ok := h.cfg.Agents.Authenticate(name, strings.TrimSpace(token))
	if !ok {
		h.metrics.connects.WithLabelValues("unauthorized").Inc()
		h.logRefusal(name, r.RemoteAddr, "with a token that doesn't match")
		http.Error(w, "This hub doesn't know this agent's name and token.", http.StatusUnauthorized)
		return
	}
	if r.Header.Get(protocol.MoveHeader) != "" && h.declineMove(entry.Name) {
		h.metrics.connects.WithLabelValues("moved_on").Inc()
		w.Header().Set("Retry-After", "1")
		http.Error(w, "This hub replica holds its share of the agents and another holds fewer: move there (the load balancer picks again after Retry-After).", http.StatusServiceUnavailable)
		return
	}
	if ok, wait := h.admission.admit(h.clock.Now(), h.admitRate()); !ok {
		h.metrics.connects.WithLabelValues("paced").Inc()
		// Whole seconds, rounded up: an agent told 1 comes back once the
		// welcomes of the second before it have aged out of the pace.
		w.Header().Set("Retry-After", strconv.Itoa(int((wait+time.Second-1)/time.Second)))
		http.Error(w, "The hub is taking many agents back at once; try again after Retry-After.", http.StatusServiceUnavailable)
		return
	}
	// The place is serveConn's from here, or given back on the way out.
	handedOn := false
	defer func() {
		if !handedOn {
			h.admission.giveBack()
		}
	}()
	h.mu.Lock()
	closed, draining := h.closed, h.draining
	if !closed && !draining {
		h.conns.Add(1)
	}
	h.mu.Unlock()
	if closed || draining {
		// Another replica takes it: the load balancer sends it elsewhere
		// next time, this one being on its way out.
		w.Header().Set("Retry-After", "1")
		http.Error(w, "The hub is shutting down.", http.StatusServiceUnavailable)
		return
	}
	sess, err := tunnel.Accept(w, r, h.cfg.Tunnel)
	if err != nil {
		h.conns.Done()
		h.log.Debug("An agent's upgrade failed", "agent", name, "remote", r.RemoteAddr, "err", err)
		return
	}
	c, err := h.hello(r, sess, entry, listfile.HashToken(strings.TrimSpace(token)))
	if err != nil {
		h.metrics.connects.WithLabelValues("bad_hello").Inc()
		// Rate-limited like refusals: whoever holds a token can send
		// garbage as fast as they like.
		host, _ := hostport.Host(r.RemoteAddr)
		if suppressed, ok := h.refusals.Allow("hello\x00" + name + "\x00" + host); ok {
			h.log.Warn("An agent failed its hello", "agent", name, "remote", r.RemoteAddr, "err", err, "suppressed", suppressed)
		}
		sess.Close()
		h.conns.Done()
		return
	}
	if c == nil {
		sess.Close()
		h.conns.Done()
		return // refused, and logged
	}
	// The connection outlives this handler, which returns as soon as it
	// is registered: returning lets net/http drop what it kept for the
	// request (its buffered writer, the request, the handler's grown
	// stack), about a third of what an idle agent costs the hub (decision
	// 010). serveConn may wait to send the welcome, so it runs in a
	// goroutine of its own; once registered, the connection is
	// finished by whoever reads the end of its control stream.
	handedOn = true
	go func() {
		if !h.serveConn(c) {
			c.cancel()
			sess.Close()
			h.conns.Done()
		}
	}()
}

// hello reads the agent's hello and checks it. It returns nil and no error
// when it refused the agent and told it why; the welcome is serveConn's.
func (h *Hub) hello(r *http.Request, sess *tunnel.Session, entry fleet.Agent, tokenHash listfile.Hash) (*agentConn, error) {
	deadline := time.Now().Add(h.cfg.HelloTimeout)
	ctx, cancel := context.WithDeadline(r.Context(), deadline)
	defer cancel()
	ctl, err := sess.Accept(ctx)
	if err != nil {
		return nil, fmt.Errorf("no control stream within %s: %w", h.cfg.HelloTimeout, err)
	}
	ctl.SetDeadline(deadline)
	m, err := protocol.Read(ctl)
	if err != nil {
		return nil, err
	}
	if m.Type != protocol.TypeHello {
		return nil, fmt.Errorf("the first message was a %s, not a hello", m.Type)
	}
	refuse := func(status int, why string) {
		protocol.Write(ctl, protocol.Message{Type: protocol.TypeRefused, Status: status, Error: why})
	}
	if err := checkHello(m); err != nil {
		refuse(http.StatusBadRequest, err.Error())
		return nil, err
	}
	ca := parseCA([]byte(m.CACert))
	if len(ca) == 0 {
		refuse(http.StatusBadRequest, "the hello's caCert holds no PEM certificate")
		return nil, fmt.Errorf("its caCert holds no PEM certificate")
	}
	sum := sha256.Sum256([]byte(m.CACert))
	caSHA := hex.EncodeToString(sum[:])
	if !entry.CAMatches([]byte(m.CACert)) {
		h.metrics.connects.WithLabelValues("wrong_ca").Inc()
		h.log.Warn("An agent was refused: its CA is not the one its entry pins (caSha256)",
			"agent", entry.Name, "remote", r.RemoteAddr, "caSha256", caSHA, "pinned", entry.CASHA256)
		refuse(http.StatusUnauthorized, "this cluster's CA is not the one the hub's agents list pins for it (caSha256)")
		return nil, nil
	}

	c := &agentConn{
		hub:          h,
		name:         entry.Name,
		remote:       r.RemoteAddr,
		sess:         sess,
		ctl:          ctl,
		tokenHash:    tokenHash,
		caHash:       sum,
		agentVersion: m.AgentVersion,
		apiServer:    m.APIServer,
		ceiling:      ceilingOf(m),
		proxyOff:     m.ProxyOff,
		inventoryOff: m.InventoryOff,
		moves:        m.Moves,
		instance:     m.Instance,
		connection:   m.Connection,
		ca:           ca,
		saAuth:       authorization(m.ServiceAccountToken),
		since:        h.clock.Now(),
		done:         make(chan struct{}),
	}
	if c.ceiling == protocol.CeilingUnavailable {
		c.ceilingError = ShownText(m.CeilingError, MaxStatusMessage)
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.lastHeard.Store(h.clock.Now().UnixNano())

	h.mu.Lock()
	if prev, ok := h.lastCA[entry.Name]; ok && prev != caSHA {
		h.metrics.caChanges.Inc()
		h.log.Warn("An agent sent a CA other than last time", "agent", entry.Name, "caSha256", caSHA, "previous", prev)
	}
	h.lastCA[entry.Name] = caSHA
	h.mu.Unlock()

	return c, nil
}

// caUnpinned returns those of names whose connected agent sent a CA that
// the list's entry now doesn't pin (caSha256 added or changed).
func (h *Hub) caUnpinned(names []string) []string {
	var out []string
	for _, name := range names {
		entry, ok := h.cfg.Agents.Lookup(name)
		if !ok || entry.CASHA256 == "" {
			continue
		}
		h.mu.Lock()
		sent, connected := h.lastCA[name], h.agents[name] != nil
		h.mu.Unlock()
		if connected && sent != entry.CASHA256 {
			out = append(out, name)
		}
	}
	return out
}

// welcome answers the agent's hello, within the hello's deadline. serveConn
// sends it once the connection is registered, so a request made as soon as
// the agent says it is connected finds it.
func (c *agentConn) welcome() error {
	m := protocol.Message{Type: protocol.TypeWelcome, HubVersion: version.Version, HeartbeatMillis: c.hub.cfg.Heartbeat.Milliseconds()}
	err := protocol.Write(c.ctl, m)
	c.ctl.SetDeadline(time.Time{})
	return err
}

// logRefusal logs a refused agent at most once per window for each name and
// address, so a misconfigured agent retrying, or someone guessing, can't
// flood the log.
func (h *Hub) logRefusal(name, remote, why string) {
	host, _ := hostport.Host(remote)
	if len(name) > 253 {
		name = name[:253] + "…"
	}
	if suppressed, ok := h.refusals.Allow(name + "\x00" + host); ok {
		h.log.Warn(fmt.Sprintf("An agent was refused: %q, %s", name, why), "agent", name, "remote", remote, "suppressed", suppressed)
	}
}

// ServeAgent takes an agent's WebSocket at <base>/api/agent.
func (h *Hub) ServeAgent(w http.ResponseWriter, r *http.Request) { h.serveAgent(w, r, false) }

// ServeOwnAgent takes the WebSocket of one of the hub's own agents, for a
// cluster it reaches itself (Config.Direct), which it admits even when
// OwnAgentsOnly refuses every other agent.
func (h *Hub) ServeOwnAgent(w http.ResponseWriter, r *http.Request) { h.serveAgent(w, r, true) }

// ceilingOf is the ceiling a hello says holds: none said (an agent from
// before strictMode) is CeilingOff.
func ceilingOf(m protocol.Message) string {
	if m.Ceiling == "" {
		return protocol.CeilingOff
	}
	return m.Ceiling
}
