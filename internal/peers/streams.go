package peers

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tetherhq/tether/internal/hub"
	"github.com/tetherhq/tether/internal/kubeproxy"
)

// A request for a cluster whose agent another replica holds goes through
// that replica as bytes: the holder opens a stream through the agent to
// the API server and splices it to the peer connection the replica that
// received the request opened, which speaks TLS to the API server over it
// and sends the request itself, through a pool of such connections, as the
// holder would through its own (decision 042). The holder counts each
// stream against the agent's bounds, as its own; it parses nothing that
// passes, so a forwarded request costs about what a copying relay adds.
//
// The replica that sends needs the cluster's CA and the agent's service
// account, which it asks the holder for (credentialsPath) when it first
// reaches the cluster, and again once they are credentialsFresh old.

const (
	// streamsPath + cluster, with Upgrade: streamProtocol, opens a stream
	// to the cluster's API server through the agent connected there.
	streamsPath    = "/peer/v1/streams/"
	streamProtocol = "tether-stream"
	// credentialsPath + cluster answers the cluster's credentials (JSON).
	credentialsPath = "/peer/v1/credentials/"
)

// credentialsFresh is how long a replica sends with the credentials it
// got from the holder before it asks again. The agent reads its service
// account token every TETHER_TOKEN_REREAD_SECONDS (60) and tells the holder
// of a new one; the old one stays valid long after (Kubernetes rotates
// them at 80 % of their life, an hour or more).
const credentialsFresh = 30 * time.Second

// credentials is the holder's answer on credentialsPath.
type credentials struct {
	CA            [][]byte `json:"ca"`            // DER
	Authorization string   `json:"authorization"` // the service account's
}

// spliced reaches a cluster's API server through streams the holder
// splices: an upstream's, made on the first request that goes through it.
type spliced struct {
	u *upstream

	people, upgrades, own *http.Transport
	watches               kubeproxy.Watches // the watch answers through them

	credsMu sync.Mutex // guards creds and credsAt; held while they are asked for
	creds   *credentials
	credsAt time.Time
}

// serveStream is the holder's side: it opens a stream through the agent
// connected here, answers 101, and splices the two until either ends.
func (p *Peers) serveStream(w http.ResponseWriter, r *http.Request) {
	if !strings.EqualFold(r.Header.Get("Upgrade"), streamProtocol) {
		http.Error(w, "this path takes only an upgrade to "+streamProtocol, http.StatusBadRequest)
		return
	}
	name := r.PathValue("cluster")
	src, _ := p.cfg.Hub.Local(name).(hub.Spliced)
	if src == nil {
		notHeld(w, name)
		return
	}
	ctx := r.Context()
	if r.Header.Get(headerOwn) != "" {
		ctx = hub.OwnRequest(ctx)
	}
	st, err := src.DialStream(ctx)
	if err != nil {
		streamError(w, err)
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		st.Close()
		return
	}
	if _, err := io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: "+streamProtocol+"\r\n\r\n"); err != nil {
		st.Close()
		conn.Close()
		return
	}
	p.splice(conn, brw.Reader, st)
}

// notHeld answers a replica that asked this one for a cluster whose agent
// isn't connected here.
func notHeld(w http.ResponseWriter, name string) {
	w.Header().Set(headerError, "not-held")
	http.Error(w, fmt.Sprintf("the agent of %q is not connected to this replica", name), http.StatusBadGateway)
}

// streamError answers a replica whose stream the agent couldn't open.
func streamError(w http.ResponseWriter, err error) {
	var limit *hub.StreamLimitError
	switch {
	case errors.As(err, &limit):
		w.Header().Set(headerError, "stream-limit")
		w.Header().Set(headerLimit, strconv.Itoa(limit.Limit()))
	default:
		w.Header().Set(headerError, "failed")
	}
	http.Error(w, err.Error(), http.StatusBadGateway)
}

// splice copies bytes between conn (what of it br holds first) and st both
// ways, passing half-closes on, until both ways end or either fails; then
// it closes both. Peers.Close closes those still open.
func (p *Peers) splice(conn net.Conn, br *bufio.Reader, st net.Conn) {
	if !p.track(conn, st) {
		conn.Close()
		st.Close()
		return
	}
	defer p.untrack(conn)
	var from io.Reader = conn
	if br.Buffered() > 0 {
		from = io.MultiReader(io.LimitReader(br, int64(br.Buffered())), conn)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		copyThenCloseWrite(st, from, conn)
	}()
	copyThenCloseWrite(conn, st, st)
	<-done
	conn.Close()
	st.Close()
}

// copyThenCloseWrite copies src to dst, then half-closes dst. A copy that
// fails, rather than reach the end, closes both ends (srcConn and dst) so
// that the other way ends too.
func copyThenCloseWrite(dst net.Conn, src io.Reader, srcConn net.Conn) {
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		srcConn.Close()
		return
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
}

// serveCredentials answers the credentials of a cluster whose agent is
// connected here.
func (p *Peers) serveCredentials(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("cluster")
	src, _ := p.cfg.Hub.Local(name).(hub.Spliced)
	if src == nil {
		notHeld(w, name)
		return
	}
	ca, auth := src.Credentials()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(credentials{CA: ca, Authorization: auth})
}

// errNoStreams is a holder's answer when it splices no streams: a replica
// of a version before them, during a rolling update. Requests go to it
// over HTTP (forward.go).
var errNoStreams = errors.New("the replica splices no streams")

// splicedOf returns u's spliced, made on first use.
func (u *upstream) splicedOf() *spliced {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.sp == nil {
		u.sp = newSpliced(u)
	}
	return u.sp
}

func newSpliced(u *upstream) *spliced {
	s := &spliced{u: u}
	s.people = hub.NewAPITransport(func(ctx context.Context) (net.Conn, error) { return s.dial(ctx, false) }, idleTimeout)
	// The holder counts these against the agent's streams, and can't
	// close them when people reach the bound, as it closes its own idle
	// ones: each replica keeps fewer.
	s.people.MaxIdleConnsPerHost = maxIdleSpliced
	s.upgrades = hub.NewAPITransport(func(ctx context.Context) (net.Conn, error) { return s.dial(ctx, false) }, idleTimeout)
	s.upgrades.MaxIdleConnsPerHost = -1 // never keep one
	s.own = hub.NewAPITransport(func(ctx context.Context) (net.Conn, error) { return s.dial(ctx, true) }, idleTimeout)
	s.own.MaxIdleConnsPerHost = 1 // access reviews, now and then
	return s
}

// idleTimeout is how long a spliced connection stays open unused.
const idleTimeout = 90 * time.Second

// maxIdleSpliced is how many idle connections to a cluster's API server
// through another replica one replica keeps.
const maxIdleSpliced = 8

// roundTrip sends r to the API server over a spliced connection, as the
// holder would send it through its own.
func (s *spliced) roundTrip(r *http.Request) (*http.Response, error) {
	creds, err := s.credentials(r.Context())
	if err != nil {
		return nil, err
	}
	if r.Header.Get("Authorization") == serviceAccountPlaceholder {
		out := new(http.Request)
		*out = *r
		out.Header = r.Header.Clone()
		out.Header.Set("Authorization", creds.Authorization)
		r = out
	}
	t := s.people
	switch {
	case hub.IsOwnRequest(r.Context()):
		t = s.own
	case r.Header.Get("Upgrade") != "":
		t = s.upgrades
	}
	resp, err := t.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	s.watches.Track(resp)
	if s.u.l.watchesEnding.Load() {
		s.watches.End()
	}
	return resp, nil
}

// endWatches ends the watches spliced for u at their next event's end.
func (u *upstream) endWatches() {
	u.mu.Lock()
	sp := u.sp
	u.mu.Unlock()
	if sp != nil {
		sp.watches.End()
	}
}

// end closes the connections kept for u, whose claim has ended: requests
// go through the cluster's next holder. Those under way finish; watches
// end at their next event's end, and their clients watch again.
func (s *spliced) end() {
	s.watches.End()
	for _, t := range []*http.Transport{s.people, s.upgrades, s.own} {
		t.CloseIdleConnections()
	}
}

// dial opens a connection to the API server through the holder: a peer
// connection the holder splices to a stream through the agent, with TLS to
// the API server inside it. own asks for one of the hub's own streams.
func (s *spliced) dial(ctx context.Context, own bool) (net.Conn, error) {
	l := s.u.l
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: peerDialTimeout}, Config: l.p.cfg.Members.ClientTLS(l.name)}
	c, err := d.DialContext(ctx, "tcp", l.addr)
	if err != nil {
		return nil, fmt.Errorf("the hub replica %q, which holds its agent, can't be reached: %w", l.name, err)
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(peerDialTimeout)
	}
	c.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	resp, err := s.upgrade(c, own)
	stop()
	if err == nil && resp.StatusCode != http.StatusSwitchingProtocols {
		err = holderError(s.u.cluster, resp)
	}
	if err != nil {
		c.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	c.SetDeadline(time.Time{})
	s.credsMu.Lock()
	ca := s.creds.CA
	s.credsMu.Unlock()
	return hub.HandshakeAPI(ctx, c, hub.APIServerTLS(ca, hub.APIServerName))
}

// peerDialTimeout bounds a connection to another replica, and its answer
// to the upgrade.
const peerDialTimeout = 10 * time.Second

// upgrade asks the holder, on c, for a stream to the cluster's API server,
// and reads its answer. After a 101 the API server speaks only once asked:
// a holder that sent more is broken.
func (s *spliced) upgrade(c net.Conn, own bool) (*http.Response, error) {
	req := "GET " + streamsPath + s.u.cluster + " HTTP/1.1\r\nHost: " + s.u.l.addr +
		"\r\nConnection: Upgrade\r\nUpgrade: " + streamProtocol + "\r\n"
	if own {
		req += headerOwn + ": 1\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		return nil, fmt.Errorf("the hub replica %q, which holds its agent: %w", s.u.l.name, err)
	}
	br := bufio.NewReaderSize(c, 1024)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, fmt.Errorf("the hub replica %q, which holds its agent, didn't answer: %w", s.u.l.name, err)
	}
	if resp.StatusCode == http.StatusSwitchingProtocols && br.Buffered() > 0 {
		return nil, fmt.Errorf("the hub replica %q sent bytes the API server hadn't been asked for", s.u.l.name)
	}
	return resp, nil
}

// credentials returns the cluster's CA and service account, asked of the
// holder once they are credentialsFresh old.
func (s *spliced) credentials(ctx context.Context) (*credentials, error) {
	s.credsMu.Lock()
	defer s.credsMu.Unlock()
	if s.creds != nil && time.Since(s.credsAt) < credentialsFresh {
		return s.creds, nil
	}
	l := s.u.l
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+l.addr+credentialsPath+s.u.cluster, nil)
	if err != nil {
		return nil, err
	}
	resp, err := l.transport.RoundTrip(req)
	if err != nil {
		return nil, fmt.Errorf("the hub replica %q, which holds its agent, can't be reached: %w", l.name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, holderError(s.u.cluster, resp)
	}
	var c credentials
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxCredentials)).Decode(&c); err != nil {
		return nil, fmt.Errorf("the hub replica %q sent credentials that don't decode: %w", l.name, err)
	}
	s.creds, s.credsAt = &c, time.Now()
	return s.creds, nil
}

// maxCredentials bounds a holder's credentials: an agent's hello, which
// carries them, is at most 1 MiB.
const maxCredentials = 1 << 20

// holderError is the error a holder's answer other than the one asked
// for says, and closes its body: why it couldn't carry the request (its
// headerError), or errNoStreams from a replica that has no such path.
func holderError(cluster string, resp *http.Response) error {
	defer resp.Body.Close()
	kind := resp.Header.Get(headerError)
	if kind == "" && resp.StatusCode == http.StatusNotFound {
		return errNoStreams
	}
	why, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	switch kind {
	case "stream-limit":
		limit, _ := strconv.Atoi(resp.Header.Get(headerLimit))
		return hub.StreamLimit(cluster, limit)
	case "not-held":
		return errNotHeld
	case "":
		return fmt.Errorf("the hub replica that holds its agent answered %s", resp.Status)
	}
	return errors.New(strings.TrimSpace(string(why)))
}
