package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode"

	"github.com/tetherhq/tether/internal/protocol"
)

// Cluster statuses, as people and the JSON API see them.
const (
	Ready       = "Ready"
	Unreachable = "Unreachable"
)

// MessageNotConnected is the status message of a cluster whose agent isn't
// connected.
const MessageNotConnected = "Its agent isn't connected."

// MessageChecking is the status message of a cluster whose agent has
// connected before the hub's first probe of its API server through it has
// answered: until then the hub can't say it is Ready.
const MessageChecking = "Its agent is connected; the hub is checking its API server."

// ClusterStatus is what the hub knows of one cluster's health.
type ClusterStatus struct {
	Name              string
	Status            string // Ready or Unreachable
	Message           string // why it is Unreachable
	KubernetesVersion string
	AgentVersion      string
	ConnectedSince    time.Time // zero when no agent is connected
	LastSeen          time.Time // the last time the agent was heard from
	// Ceiling is protocol.CeilingEnforced when the connected agent says
	// the cluster's API server caps what comes through Tether (strictMode),
	// else protocol.CeilingOff.
	Ceiling string
	// Halves is which halves the connected agent runs; nil when no agent
	// is connected.
	Halves *Halves
}

// Halves is which halves of Tether a cluster's agent runs (SPEC section
// 9): the proxy of people's requests, and the inventory. An agent from
// before TETHER_PROXY and TETHER_INVENTORY runs both.
type Halves struct {
	Proxy     bool `json:"proxy"`
	Inventory bool `json:"inventory"`
}

// String is the status as people see it: "Ready" or "Unreachable: <why>".
func (s ClusterStatus) String() string {
	if s.Status == Ready {
		return Ready
	}
	return s.Status + ": " + s.Message
}

// clusterStatus is the hub's record of one cluster, guarded by Hub.mu.
type clusterStatus struct {
	ClusterStatus
	history []StatusChange // oldest first, at most maxHistory
}

// StatusChange is one entry of a cluster's status history.
type StatusChange struct {
	Time   time.Time `json:"time"`
	Status string    `json:"status"` // as people see it: "Ready" or "Unreachable: <why>"
}

// maxHistory bounds each cluster's status history.
const maxHistory = 50

// History returns cluster name's status changes, newest first.
func (h *Hub) History(name string) []StatusChange {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.historyLocked(name)
}

func (h *Hub) historyLocked(name string) []StatusChange {
	if c := h.claimLocked(name); c != nil && h.agents[name] == nil {
		return slices.Clone(c.History)
	}
	s, ok := h.status[name]
	if !ok {
		return nil
	}
	out := make([]StatusChange, len(s.history))
	for i, c := range s.history {
		out[len(out)-1-i] = c
	}
	return out
}

type probeResult struct {
	ready    bool
	version  string
	message  string
	lastSeen time.Time // set when the agent has gone
	// gone: the agent left. Recorded only while no other agent of the
	// cluster is connected: finish records it after it let go of h.mu,
	// and one that connected meanwhile may have been probed already.
	gone bool
	// skipped: no probe was sent (probe), and the status stays as it was.
	skipped bool
}

// notConnected is the status of a cluster whose agent has gone; lastSeen is
// when the hub last heard from it, which the cluster keeps showing.
func notConnected(lastSeen time.Time) probeResult {
	return probeResult{message: MessageNotConnected, lastSeen: lastSeen, gone: true}
}

// Clusters returns the status of every cluster in the agents list, and of
// any connected agent's cluster, sorted by name.
func (h *Hub) Clusters() []ClusterStatus {
	names := map[string]bool{}
	for _, a := range h.cfg.Agents.List() {
		names[a.Name] = true
	}
	h.mu.Lock()
	for n := range h.agents {
		names[n] = true
	}
	for n := range h.claims {
		names[n] = true
	}
	out := make([]ClusterStatus, 0, len(names))
	for n := range names {
		out = append(out, h.clusterLocked(n))
	}
	h.mu.Unlock()
	// Sorted outside h.mu: at 15,000 clusters the sort holds up every
	// agent's registration and probe record for as long as it takes.
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Cluster returns one cluster's status; ok is false for a name the hub
// doesn't know.
func (h *Hub) Cluster(name string) (ClusterStatus, bool) {
	_, known := h.cfg.Agents.Lookup(name)
	h.mu.Lock()
	defer h.mu.Unlock()
	_, connected := h.agents[name]
	if _, claimed := h.claims[name]; !known && !connected && !claimed {
		return ClusterStatus{}, false
	}
	return h.clusterLocked(name), true
}

func (h *Hub) clusterLocked(name string) ClusterStatus {
	st := ClusterStatus{Name: name, Status: Unreachable, Message: MessageNotConnected}
	if s, ok := h.status[name]; ok {
		st = s.ClusterStatus
	}
	st.Ceiling = protocol.CeilingOff
	if c, ok := h.agents[name]; ok {
		if c.ceiling == protocol.CeilingEnforced {
			st.Ceiling = protocol.CeilingEnforced
		}
		if st.Message == MessageNotConnected {
			st.Message = MessageChecking
		}
		st.ConnectedSince = c.since
		st.LastSeen = time.Unix(0, c.lastHeard.Load())
		st.AgentVersion = c.agentVersion
		st.Halves = &Halves{Proxy: !c.proxyOff, Inventory: !c.inventoryOff}
	} else if c := h.claimLocked(name); c != nil {
		st = c.Status
		st.Name = name
	} else {
		st.ConnectedSince = time.Time{}
	}
	return st
}

// A status's texts can carry what a cluster sent (its agent's words, its
// API server's status line and /version, the names in its certificate),
// and everyone who sees the cluster reads them: on the page, in the API,
// the event stream and kubectl's 503. They are cut to these bounds
// (issue 33: an agent's dial error of a megabyte was shown whole).
const (
	MaxStatusMessage     = 500
	maxAgentWords        = 300 // of an agent's own account, within the message
	maxKubernetesVersion = 128
)

// ShownText makes text that came from a cluster fit to show to people: cut
// to n bytes (marked "…"), with control and format characters (escape
// sequences, line breaks, zero-width and bidi characters) made spaces.
func ShownText(s string, n int) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029' {
			return ' '
		}
		return r
	}, protocol.Clip(s, n))
}

// setStatus records a probe's result and logs a change.
func (h *Hub) setStatus(name, agentVersion string, r probeResult) {
	next := ClusterStatus{Name: name, Status: Unreachable, Message: ShownText(r.message, MaxStatusMessage), AgentVersion: agentVersion}
	if r.ready {
		next = ClusterStatus{Name: name, Status: Ready, KubernetesVersion: ShownText(r.version, maxKubernetesVersion), AgentVersion: agentVersion}
	}
	_, listed := h.cfg.Agents.Lookup(name)
	h.mu.Lock()
	if !listed && h.agents[name] == nil {
		// Gone from the agents list: forget it, so status records don't
		// pile up as clusters come and go, and a name listed again starts
		// afresh.
		delete(h.status, name)
		delete(h.lastCA, name)
		h.mu.Unlock()
		return
	}
	if r.gone && h.agents[name] != nil {
		h.mu.Unlock()
		return
	}
	prev, had := h.status[name]
	h.texts.status(&next)
	next.LastSeen = r.lastSeen
	if next.LastSeen.IsZero() && had {
		next.LastSeen = prev.LastSeen
	}
	cur := &clusterStatus{ClusterStatus: next}
	if had {
		cur.history = prev.history
	}
	changed := !had || prev.String() != next.String() || prev.KubernetesVersion != next.KubernetesVersion
	if changed {
		cur.history = append(cur.history, StatusChange{Time: h.clock.Now().UTC().Truncate(time.Second), Status: h.texts.of(next.String())})
		if len(cur.history) > maxHistory {
			cur.history = cur.history[len(cur.history)-maxHistory:]
		}
	}
	h.status[name] = cur
	h.mu.Unlock()
	if !changed {
		return
	}
	h.events.changed(name)
	if next.Status == Ready {
		h.log.Info("A cluster is Ready", "cluster", name, "kubernetesVersion", next.KubernetesVersion)
	} else {
		h.log.Warn("A cluster is Unreachable", "cluster", name, "why", next.Message)
	}
}

// startProbes probes c's cluster at once, then every ProbeInterval, until
// ctx is done or the loop is stopped. Probes start every ProbeInterval
// (SPEC section 2: every 10 s), not ProbeInterval after the last one ended:
// a slow API server is probed as often as a quick one. A probe that takes
// longer than ProbeInterval is followed by the next at once; probes never
// overlap.
func (h *Hub) startProbes(ctx context.Context, c *agentConn) *timerLoop {
	return startTimerLoop(h.clock, 0, func() (time.Duration, bool) {
		start := h.clock.Now()
		if !h.probeAndRecord(ctx, c) {
			return 0, false
		}
		return max(h.cfg.ProbeInterval-h.clock.Now().Sub(start), 0), true
	})
}

// probeAndRecord probes c's cluster and records what it found, unless c's
// connection ended meanwhile: a probe the tunnel's end cut short says
// nothing of the API server, and finish records the disconnect. Nor does
// a connection that is no longer the cluster's record anything, nor probe
// again: its agent moved (to another replica, or to a new connection
// here) and the cluster's status is its new connection's. It reports
// whether to probe again.
func (h *Hub) probeAndRecord(ctx context.Context, c *agentConn) bool {
	r := h.probe(ctx, c)
	select {
	case <-c.sess.Done(): // closed before any stream fails for it
		return false
	default:
	}
	if ctx.Err() != nil || h.connected(c.name) != c {
		return false
	}
	if !r.skipped {
		h.setStatus(c.name, c.agentVersion, r)
	}
	return true
}

// probe asks the cluster's API server, through the tunnel and as the agent's
// service account, whether it is ready and which version it runs.
//
// Probes go through the hub's own transport to the cluster (hubTransport),
// whose idle connection the next probe takes again: a TLS handshake with
// the API server cost the hub 1.4 ms, so one per probe, every 10 s, took
// 20 % of a core per 1,000 clusters (decision 019). People's requests have
// a pool of their own, so the probes' connection never carries a large
// answer, which would leave crypto/tls's input buffer large.
func (h *Hub) probe(ctx context.Context, c *agentConn) probeResult {
	if c.ceiling == protocol.CeilingUnavailable {
		// Its API server would refuse every request as a person: the
		// cluster is Unreachable, for people, whatever /readyz says.
		return probeResult{message: c.ceilingError}
	}
	if c.probeUnconnected.Load() && c.ownDials.Load() > 0 {
		// The last probe gave up before it had a connection, and a dial
		// is still under way: net/http gives its connection to the next
		// request, this probe's, which would otherwise dial another. When
		// the hub's own dials wait long for their turn (turns.go), each
		// probe would add one, and each a TLS handshake, just when the
		// hub has the least CPU for them. The status stays as the last
		// probe left it.
		return probeResult{skipped: true}
	}
	ctx, cancel := context.WithTimeout(OwnRequest(ctx), h.cfg.ProbeTimeout)
	defer cancel()
	connected := false
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { connected = true }})
	client, done := c.hubTransport()
	defer done()
	_, err := h.get(ctx, client, c, "/readyz")
	c.probeUnconnected.Store(!connected)
	if err != nil {
		return probeResult{message: err.Error()}
	}
	body, err := h.get(ctx, client, c, "/version")
	if err != nil {
		return probeResult{message: err.Error()}
	}
	var v struct {
		GitVersion string `json:"gitVersion"`
	}
	if err := json.Unmarshal(body, &v); err != nil || v.GitVersion == "" {
		return probeResult{message: "its API server's /version answer has no gitVersion"}
	}
	return probeResult{ready: true, version: v.GitVersion}
}

func (h *Hub) get(ctx context.Context, t http.RoundTripper, c *agentConn, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+c.apiHost()+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", c.serviceAccountAuth())
	resp, err := t.RoundTrip(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("its API server didn't answer %s within %s", path, h.cfg.ProbeTimeout)
		}
		if de := agentDialError(""); errors.As(err, &de) {
			return nil, de // "the agent can't reach its API server at …"
		}
		return nil, fmt.Errorf("its API server can't be reached: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("its API server's answer to %s broke off: %v", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("its API server answered %s with %s", path, resp.Status)
	}
	return body, nil
}
