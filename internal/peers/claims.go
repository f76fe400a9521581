package peers

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetherhq/tether/internal/hub"
	"github.com/tetherhq/tether/internal/inventory/store"
)

// Each replica streams its claims to every other that asks: the clusters
// whose agents it holds, with their status, first all of them, then each
// change as the hub's subscribers hear of it, and a ping when there is
// nothing to say. Cluster ownership travels this way, replica to replica,
// not through the Kubernetes API (issue 35: its writes stay proportional
// to the replicas, not the clusters).

const (
	claimsPath   = "/peer/v1/claims"
	clustersPath = "/peer/v1/clusters/"
)

// message is one line of a claims stream.
type message struct {
	Type    string    `json:"type"` // one of the types below
	Cluster string    `json:"cluster,omitempty"`
	Since   time.Time `json:"since,omitzero"`
	// Instance and Connection order two connections of one agent process
	// (hub.Claim).
	Instance   string             `json:"instance,omitempty"`
	Connection uint64             `json:"connection,omitempty"`
	Status     *hub.ClusterStatus `json:"status,omitempty"`
	History    []hub.StatusChange `json:"history,omitempty"`
	// Inventory is the holder's account of the cluster's inventory as a
	// whole (hub.Claim).
	Info *store.Info `json:"inventoryInfo,omitempty"`
	// Ceiling, CeilingWhy, Proxy and Inventory are the agent
	// connection's Ceiling and Halves (hub.Upstream).
	Ceiling    string `json:"ceiling,omitempty"`
	CeilingWhy string `json:"ceilingWhy,omitempty"`
	Proxy      bool   `json:"proxy,omitempty"`
	Inventory  bool   `json:"inventory,omitempty"`
}

const (
	typeClaim   = "claim"   // the replica holds Cluster's agent
	typeUnclaim = "unclaim" // it no longer does
	typeSynced  = "synced"  // every claim held when the stream began has been sent
	typePing    = "ping"
	// typeEndWatches says the replica is stopping: the watches it splices
	// for the reader are to end at their next event's end (EndWatches).
	typeEndWatches = "endWatches"
	// typeDraining says the replica drains: it takes no more agents, and
	// its own are moving to the others (Drain).
	typeDraining = "draining"
)

// flushAt is how much of a claims stream is kept before it is sent: the
// first account of thousands of claims goes out as it is made, so the
// reader hears something well within three pings.
const flushAt = 64 << 10

// maxLine bounds a line of a claims stream: a claim with its history of
// 50 changes is about 30 KB.
const maxLine = 256 << 10

// serveClaims streams this replica's claims to another replica.
func (p *Peers) serveClaims(w http.ResponseWriter, r *http.Request) {
	// Each changed cluster by name: past a bound, a storm of agents
	// moving would have this stream build every claim again, and go
	// silent while it did, for longer than its reader waits.
	sub := p.cfg.Hub.SubscribeEach()
	defer sub.Close()
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "application/x-ndjson")
	// The digest of the last claim sent of each cluster, not the line: a
	// line is 0.6 to 5 KB, kept for each cluster held and each replica
	// reading, where the digest is 32 bytes.
	sent := map[string][sha256.Size]byte{}
	var buf bytes.Buffer
	failed := false
	send := func() bool {
		if !failed {
			_, err := w.Write(buf.Bytes())
			failed = err != nil || rc.Flush() != nil
		}
		buf.Reset()
		return !failed
	}
	one := func(name string) {
		if buf.Len() >= flushAt {
			send()
		}
		line := p.claimLine(name)
		if line == nil {
			if _, ok := sent[name]; ok {
				delete(sent, name)
				buf.Write(encode(message{Type: typeUnclaim, Cluster: name}))
			}
			return
		}
		sum := sha256.Sum256(line)
		if last, ok := sent[name]; !ok || last != sum {
			sent[name] = sum
			buf.Write(line)
		}
	}
	all := func() {
		held := map[string]bool{}
		for _, n := range p.cfg.Hub.HeldNames() {
			held[n] = true
			one(n)
		}
		for n := range sent {
			if !held[n] {
				one(n)
			}
		}
	}
	all()
	buf.Write(encode(message{Type: typeSynced}))
	if !send() {
		return
	}
	ping := time.NewTicker(p.cfg.Ping)
	defer ping.Stop()
	ending, draining := p.watchesEnding, p.draining
	for {
		select {
		case <-r.Context().Done():
			return
		case <-draining:
			draining = nil
			buf.Write(encode(message{Type: typeDraining}))
		case <-ending:
			ending = nil
			buf.Write(encode(message{Type: typeEndWatches}))
		case <-sub.Wake():
			names, everything := sub.Take()
			if everything {
				all()
			}
			for _, n := range names {
				one(n)
			}
			if buf.Len() == 0 {
				continue
			}
		case <-ping.C:
			buf.Write(encode(message{Type: typePing}))
		}
		if !send() {
			return
		}
		ping.Reset(p.cfg.Ping)
	}
}

// Drain tells the other replicas, on their claims streams, that this one
// drains: it takes no more agents, and theirs aren't to be sent its way
// (hub's balance.go).
func (p *Peers) Drain() {
	p.drainOnce.Do(func() { close(p.draining) })
}

// claimLine is the claim line of cluster name, or nil if this replica
// doesn't hold its agent.
func (p *Peers) claimLine(name string) []byte {
	c, ok := p.cfg.Hub.Held(name)
	up := p.cfg.Hub.Local(name)
	if !ok || up == nil {
		return nil
	}
	m := message{Type: typeClaim, Cluster: name, Since: c.Since, Instance: c.Instance, Connection: c.Connection,
		Status: &c.Status, History: c.History, Info: c.Inventory}
	m.Ceiling, m.CeilingWhy = up.Ceiling()
	m.Proxy, m.Inventory = up.Halves()
	return encode(m)
}

func encode(m message) []byte {
	b, _ := json.Marshal(m)
	return append(b, '\n')
}

// link is this replica's side of another's claims stream, and the
// transport its requests to that replica take.
type link struct {
	p         *Peers
	name      string
	addr      string
	transport *http.Transport
	cancel    context.CancelFunc
	done      chan struct{}
	// noStreams says the replica splices no streams (a version before
	// them): requests go to its forwarder.
	noStreams atomic.Bool
	// watchesEnding says the replica is stopping (typeEndWatches).
	watchesEnding atomic.Bool

	mu        sync.Mutex           // guards upstreams
	upstreams map[string]*upstream // by cluster, while the replica claims it
}

func (p *Peers) startLink(peer Peer) *link {
	ctx, cancel := context.WithCancel(p.ctx)
	l := &link{p: p, name: peer.Name, addr: peer.Addr, cancel: cancel, done: make(chan struct{}),
		upstreams: map[string]*upstream{}}
	l.transport = &http.Transport{
		TLSClientConfig:     p.cfg.Members.ClientTLS(peer.Name),
		TLSHandshakeTimeout: 5 * time.Second,
		// The request goes as the client sent it: one that asked for no
		// gzip must not reach the API server asking for it, to be
		// decompressed here (a 21 MB list came at 0.37× the holder's
		// throughput; 1.31× without).
		DisableCompression:  true,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
		// HTTP/1.1: upgrades (exec, port-forward) go through as they do
		// to an API server.
		ForceAttemptHTTP2: false,
		TLSNextProto:      map[string]func(string, *tls.Conn) http.RoundTripper{},
	}
	go l.run(ctx)
	return l
}

// stop ends the link and waits for it; what the replica claimed is
// dropped.
func (l *link) stop() {
	l.cancel()
	<-l.done
	l.transport.CloseIdleConnections()
}

// run reads the replica's claims stream, again after each end, until the
// link stops. Whenever the stream ends, the replica's claims are dropped:
// its clusters are Unreachable here until the stream is back, or their
// agents connect elsewhere.
func (l *link) run(ctx context.Context) {
	defer close(l.done)
	defer l.forget()
	wait := 50 * time.Millisecond
	for {
		synced, err := l.read(ctx)
		l.forget()
		if ctx.Err() != nil {
			return
		}
		if synced {
			wait = 50 * time.Millisecond
		}
		l.p.log.Warn("The claims stream of another hub replica ended", "replica", l.name, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// read reads one claims stream until it ends, and reports whether it got
// as far as the replica's first full account.
func (l *link) read(ctx context.Context) (synced bool, err error) {
	// A new stream may be a new process at the same address.
	l.watchesEnding.Store(false) // until this stream says so again
	l.noStreams.Store(false)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+l.addr+claimsPath, nil)
	if err != nil {
		return false, err
	}
	resp, err := l.transport.RoundTrip(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("its claims stream answered %s", resp.Status)
	}
	// A stream silent for three pings is dead, as a silent network drop
	// leaves it: no read ever fails on its own.
	silent := 3 * l.p.cfg.Ping
	watchdog := time.AfterFunc(silent, func() { cancel(errSilent) })
	defer watchdog.Stop()
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(make([]byte, 0, 4096), maxLine)
	lines.Split(fullLines)
	for lines.Scan() {
		// The silence is the stream's: the time this replica takes to
		// take a line in (the hub's lock, in a storm of agents) is not.
		watchdog.Stop()
		m, err := decode(lines.Bytes())
		if err != nil {
			return synced, err
		}
		switch m.Type {
		case typeSynced:
			synced = true
			l.p.cfg.Hub.SetPeer(l.name, false)
		case typeDraining:
			l.p.cfg.Hub.SetPeer(l.name, true)
		case typeClaim:
			l.claim(m)
		case typeUnclaim:
			l.unclaim(m.Cluster)
		case typeEndWatches:
			l.endWatches()
		}
		watchdog.Reset(silent)
	}
	if err := context.Cause(ctx); err != nil {
		return synced, err
	}
	if err := lines.Err(); err != nil {
		return synced, err
	}
	return synced, io.ErrUnexpectedEOF
}

var errSilent = errors.New("nothing came for three pings")

// fullLines splits a claims stream into lines, as bufio.ScanLines does,
// but drops a last line that has no newline: a stream cut midway (its
// replica gone, or silent and given up on) ends there, and is reported as
// what cut it, not as a line that isn't JSON.
func fullLines(data []byte, atEOF bool) (advance int, token []byte, err error) {
	if atEOF && bytes.IndexByte(data, '\n') < 0 {
		return len(data), nil, nil
	}
	return bufio.ScanLines(data, atEOF)
}

// decode reads one line of a claims stream.
func decode(line []byte) (message, error) {
	var m message
	if err := json.Unmarshal(line, &m); err != nil {
		return message{}, fmt.Errorf("a line of its claims stream is not JSON: %w", err)
	}
	switch m.Type {
	case typeClaim:
		if m.Status == nil || m.Cluster == "" {
			return message{}, errors.New("a claim in its claims stream has no cluster or status")
		}
	case typeUnclaim:
		if m.Cluster == "" {
			return message{}, errors.New("an unclaim in its claims stream names no cluster")
		}
	}
	return m, nil
}

// claim records the replica's claim of a cluster in the hub. The same
// agent connection (the same Since) keeps its upstream, and with it what
// people's side keeps of it (the access reviews' cache).
func (l *link) claim(m message) {
	l.mu.Lock()
	u := l.upstreams[m.Cluster]
	if u == nil || !u.since.Equal(m.Since) {
		if u != nil {
			u.end()
		}
		u = l.newUpstream(m.Cluster, m.Since)
		l.upstreams[m.Cluster] = u
	}
	u.set(m)
	l.mu.Unlock()
	l.p.cfg.Hub.SetClaim(l.name, m.Cluster, &hub.Claim{Since: m.Since, Instance: m.Instance, Connection: m.Connection,
		Status: *m.Status, History: m.History, Inventory: m.Info, Upstream: u})
}

func (l *link) unclaim(cluster string) {
	l.mu.Lock()
	if u := l.upstreams[cluster]; u != nil {
		u.end()
		delete(l.upstreams, cluster)
	}
	l.mu.Unlock()
	l.p.cfg.Hub.SetClaim(l.name, cluster, nil)
}

// endWatches ends the watches spliced through the replica, which is
// stopping, at their next event's end, and those that start from now on
// at once.
func (l *link) endWatches() {
	l.watchesEnding.Store(true)
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, u := range l.upstreams {
		u.endWatches()
	}
}

// forget drops every claim of the replica.
func (l *link) forget() {
	l.mu.Lock()
	for c, u := range l.upstreams {
		u.end()
		delete(l.upstreams, c)
	}
	l.mu.Unlock()
	l.p.cfg.Hub.ForgetReplica(l.name)
}
