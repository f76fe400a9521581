package peers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/tetherhq/tether/internal/hub"
)

// A request for a cluster whose agent another replica holds: the replica
// that received it has authenticated the person, checked who may see the
// cluster, counted it against their bounds and set the impersonation
// headers, and writes its audit line. It sends the request itself through
// a stream the holder splices to the agent (streams.go). To a holder of
// the version before those streams it goes as the API server would get it,
// over HTTP, and the holder's forwarder puts the agent's service account
// token in and sends it through the agent, upgrades included; the holder
// keeps that forwarder for replicas of that version.

// Headers between replicas. The holder takes them only from a replica:
// the peer port's TLS takes no one else.
const (
	// headerServiceAccount asks the holder to authenticate the request
	// as the agent's service account, in place of the placeholder.
	headerServiceAccount = "Tether-Peer-Service-Account"
	// headerOwn marks the hub's own request (probes, access reviews:
	// hub.OwnRequest), which goes on the agent's reserved streams.
	headerOwn = "Tether-Peer-Own"
	// headerError carries why the holder couldn't send the request, so
	// the replica that received it answers as it would for an agent of
	// its own: stream-limit (with the limit), not-held, or failed.
	headerError = "Tether-Peer-Error"
	headerLimit = "Tether-Peer-Limit"

	peerHeaderPrefix = "Tether-Peer-"
)

// serviceAccountPlaceholder is what ServiceAccountAuth gives for a cluster
// another replica holds: RoundTrip turns it into the token the holder gave,
// or, to its forwarder, into headerServiceAccount.
const serviceAccountPlaceholder = "Tether-Peer service-account"

// upstream is the way to a cluster's API server through the replica that
// holds its agent: a hub.Upstream, for the kubeproxy and web of this one.
type upstream struct {
	l       *link
	cluster string
	since   time.Time

	mu sync.Mutex // guards the following
	// ctx is Context's, made when first asked for: few of the thousands
	// of clusters other replicas hold are ever reached through this one,
	// and a context each cost about 100 bytes. ended says the claim has
	// ended (end), and ctx, once made, is done.
	ctx    context.Context
	cancel context.CancelFunc
	ended  bool
	// sp reaches the API server through streams the holder splices
	// (streams.go), made on the first request sent through u.
	sp *spliced
	// What the claims stream updates.
	ceiling, why     string
	proxy, inventory bool
}

func (l *link) newUpstream(cluster string, since time.Time) *upstream {
	return &upstream{l: l, cluster: cluster, since: since}
}

// end says the claim has ended: Context is done.
func (u *upstream) end() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.ended = true
	if u.cancel != nil {
		u.cancel()
	}
	if u.sp != nil {
		// Not under the link's lock: closing a connection writes.
		u.l.p.ending.Go(u.sp.end)
	}
}

func (u *upstream) set(m message) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.ceiling, u.why, u.proxy, u.inventory = m.Ceiling, m.CeilingWhy, m.Proxy, m.Inventory
}

var _ hub.Upstream = (*upstream)(nil)

func (u *upstream) Cluster() string            { return u.cluster }
func (u *upstream) Host() string               { return hub.APIServerName }
func (u *upstream) ServiceAccountAuth() string { return serviceAccountPlaceholder }
func (u *upstream) Replica() string            { return u.l.name }

// Context is done once the claim has ended.
func (u *upstream) Context() context.Context {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.ctx == nil {
		u.ctx, u.cancel = context.WithCancel(context.Background())
		if u.ended {
			u.cancel()
		}
	}
	return u.ctx
}

func (u *upstream) Ceiling() (string, string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.ceiling, u.why
}

func (u *upstream) Halves() (bool, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.proxy, u.inventory
}

// RoundTrip sends r to the holder, on the peer port. A holder whose agent
// has just left (it moved to another replica, or went) sent nothing to the
// API server: r goes to the next holder, once its claim is in.
func (u *upstream) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := u.roundTrip(r)
	for hop := 1; errors.Is(err, errNotHeld) && hop <= maxHops; hop++ {
		next := u.l.p.nextHolder(r.Context(), u)
		if next == nil {
			return nil, fmt.Errorf("its agent left the hub replica %q, and hasn't connected again", u.l.name)
		}
		if r.Body != nil && r.Body != http.NoBody {
			if r.GetBody == nil {
				return nil, fmt.Errorf("its agent left the hub replica %q as the request went", u.l.name)
			}
			if r.Body, err = r.GetBody(); err != nil {
				return nil, err
			}
		}
		nu, ok := next.(*upstream)
		if !ok {
			// The agent connected here: the request goes as the proxy
			// would have sent it through it.
			r = r.Clone(r.Context())
			if r.Header.Get("Authorization") == serviceAccountPlaceholder {
				r.Header.Set("Authorization", next.ServiceAccountAuth())
			}
			return next.RoundTrip(r)
		}
		u = nu
		resp, err = u.roundTrip(r)
	}
	return resp, err
}

// maxHops bounds how often a request follows its cluster's agent from
// replica to replica.
const maxHops = 3

// errNotHeld is the holder's answer when the agent is no longer connected
// to it.
var errNotHeld = errors.New("the agent is not connected to that replica")

// nextHolderWait bounds the wait for another replica's claim of a cluster
// whose agent left the one a request went to.
const nextHolderWait = 3 * time.Second

// nextHolder waits for the way to cluster u's through another replica or
// this one, and returns it, or nil if none came in time.
func (p *Peers) nextHolder(ctx context.Context, u *upstream) hub.Upstream {
	sub := p.cfg.Hub.Subscribe()
	defer sub.Close()
	timer := time.NewTimer(nextHolderWait)
	defer timer.Stop()
	for {
		if next := p.cfg.Hub.Reach(u.cluster); next != nil && next != hub.Upstream(u) {
			return next
		}
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
			return nil
		case <-sub.Wake():
			sub.Take()
		}
	}
}

// roundTrip sends r through the holder: as bytes spliced to a stream
// through the agent (streams.go), or, to a replica of a version before
// them, as an HTTP request its forwarder sends on.
func (u *upstream) roundTrip(r *http.Request) (*http.Response, error) {
	if !u.l.noStreams.Load() {
		resp, err := u.splicedOf().roundTrip(r)
		if !errors.Is(err, errNoStreams) {
			return resp, err
		}
		u.l.noStreams.Store(true)
	}
	return u.forward(r)
}

// forward sends r to the holder's forwarder, over HTTP.
func (u *upstream) forward(r *http.Request) (*http.Response, error) {
	out := new(http.Request)
	*out = *r
	prefix := clustersPath + u.cluster
	out.URL = &url.URL{Scheme: "https", Host: u.l.addr, Path: prefix + r.URL.Path, RawQuery: r.URL.RawQuery}
	if r.URL.RawPath != "" {
		out.URL.RawPath = prefix + r.URL.RawPath
	}
	out.Host = u.l.addr
	out.Header = r.Header.Clone()
	// Only this replica says what the holder is to do: a person's request
	// that names a peer header itself (to borrow the agent's service
	// account, say) has it dropped.
	for k := range out.Header {
		if len(k) >= len(peerHeaderPrefix) && strings.EqualFold(k[:len(peerHeaderPrefix)], peerHeaderPrefix) {
			delete(out.Header, k)
		}
	}
	if out.Header.Get("Authorization") == serviceAccountPlaceholder {
		out.Header.Del("Authorization")
		out.Header.Set(headerServiceAccount, "1")
	}
	if hub.IsOwnRequest(r.Context()) {
		out.Header.Set(headerOwn, "1")
	}
	resp, err := u.l.transport.RoundTrip(out)
	if err != nil {
		if r.Context().Err() != nil {
			return nil, err
		}
		return nil, fmt.Errorf("the hub replica %q, which holds its agent, can't be reached: %w", u.l.name, err)
	}
	if resp.Header.Get(headerError) == "" {
		return resp, nil
	}
	return nil, holderError(u.cluster, resp)
}

// upstreamKey holds, in a carried request's context, the agent connection
// it goes through.
type upstreamKey struct{}

// newForwarder is the holder's side: a reverse proxy to the agents
// connected here.
func (p *Peers) newForwarder() http.Handler {
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			up := pr.In.Context().Value(upstreamKey{}).(hub.Upstream)
			prefix := clustersPath + up.Cluster()
			out := pr.Out
			out.URL = &url.URL{Scheme: "https", Host: up.Host(), Path: strings.TrimPrefix(pr.In.URL.Path, prefix), RawQuery: pr.In.URL.RawQuery}
			if raw := pr.In.URL.RawPath; raw != "" {
				out.URL.RawPath = strings.TrimPrefix(raw, prefix)
			}
			out.Host = up.Host()
			if out.Header.Get(headerServiceAccount) != "" {
				out.Header.Set("Authorization", up.ServiceAccountAuth())
			}
			out.Header.Del(headerServiceAccount)
			out.Header.Del(headerOwn)
		},
		Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			return r.Context().Value(upstreamKey{}).(hub.Upstream).RoundTrip(r)
		}),
		// A stopping holder ends the watches it carries at an event's
		// end (EndWatches), as it ends its own: the replica that asked
		// ends its answer cleanly, and the client watches again, through
		// the agent's next holder.
		ModifyResponse: func(resp *http.Response) error {
			p.watches.Track(resp)
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, context.Canceled) {
				return // the replica that asked went away
			}
			streamError(w, err)
		},
		// A carried answer cut short midway is the replica's that asked to
		// tell: its proxy logs it.
		ErrorLog: slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("cluster")
		up := p.cfg.Hub.Local(name)
		if up == nil {
			notHeld(w, name)
			return
		}
		ctx := context.WithValue(r.Context(), upstreamKey{}, up)
		if r.Header.Get(headerOwn) != "" {
			ctx = hub.OwnRequest(ctx)
		}
		proxy.ServeHTTP(w, r.WithContext(ctx))
	})
}

// EndWatches ends the watches this replica carries for others at their
// next event's end, and those that start from now on at once: a stopping
// replica calls it as it stops taking requests. Those it splices it can't
// see: it tells the replicas that sent them, on their claims streams, to
// end the ones through it (typeEndWatches).
func (p *Peers) EndWatches() {
	p.watches.End()
	p.endWatchesOnce.Do(func() { close(p.watchesEnding) })
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
