package kubeproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/tetherhq/tether/internal/auth"
)

// The hub keeps every request it holds open for a person, by cluster and
// person, for two things:
//
//   - bounds: one person can hold only so many requests, watches and
//     upgraded sessions open on a cluster at once (openLimits), or a script
//     gone wrong (or a stolen token) holds the hub's and the agent's memory
//     and the tunnel's streams for everyone;
//   - revocation: when the hub stops admitting someone (taken off the users
//     list, their token replaced, a cluster's groups no longer theirs, a
//     page session signed out, a credential expired), what they have open
//     ends too, not only their next request (recheckOpen). Without it an
//     exec kept printing and a watch kept delivering for hours.
//
// The fleet page's event streams (/api/events) are kept too, with no
// cluster and no bound, so a sign-out ends them at once.

// openKind is what an open request is, for its bound.
type openKind uint8

const (
	kindRequest openKind = iota // any request but a watch or an upgrade
	kindWatch                   // GET with watch=true, or under .../watch/
	kindSession                 // an upgrade: exec, attach, port-forward
	kindEvents                  // a fleet page's event stream; never bounded
	numKinds
)

// Why the hub ended a request, as its audit line's "ended" says.
const (
	endedRevoked = "revoked" // the hub no longer admits the person to the cluster as they are
	endedExpired = "expired" // the person's credential expired
)

// errEnded is the cause the context of a request the hub ended carries.
var errEnded = errors.New("the hub ended the request")

// openRequest is one request in progress that the hub may end.
type openRequest struct {
	cluster string // "" for an event stream
	person  auth.Person
	user    string   // impersonated, prefixed; "" for forwardToken clusters
	groups  []string // impersonated, prefixed
	kind    openKind
	cancel  context.CancelCauseFunc
	timer   *time.Timer // ends it at the person's credential's expiry

	mu    sync.Mutex // guards the following
	conn  net.Conn   // the client's, once an upgrade took it over
	ended string     // why the hub ended it, or ""
}

// end ends r: its context, so the copy from the API server stops, and the
// client's connection of an upgraded session, whose copy to the client may
// wait on a client that doesn't read. The first reason stays.
func (r *openRequest) end(why string) {
	r.mu.Lock()
	if r.ended != "" {
		r.mu.Unlock()
		return
	}
	r.ended = why
	c := r.conn
	r.mu.Unlock()
	r.cancel(errEnded)
	if c != nil {
		c.Close()
	}
}

// hijacked records the client's connection of an upgraded session, or
// closes it if the hub already ended the request.
func (r *openRequest) hijacked(c net.Conn) {
	r.mu.Lock()
	ended := r.ended != ""
	if !ended {
		r.conn = c
	}
	r.mu.Unlock()
	if ended {
		c.Close()
	}
}

// endedWhy is why the hub ended r, or "".
func (r *openRequest) endedWhy() string {
	if r == nil {
		return ""
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ended
}

type openKey struct{ cluster, person string }

// openSet holds the open requests and counts them by cluster, person and
// kind.
type openSet struct {
	mu     sync.Mutex // guards the following
	all    map[*openRequest]struct{}
	counts map[openKey]*[numKinds]int
}

// add takes r in unless its person already holds limit of its kind open on
// its cluster (limit 0: no bound), and says whether it did.
func (s *openSet) add(r *openRequest, limit int) bool {
	k := openKey{r.cluster, r.person.Name}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.counts[k]
	if c == nil {
		c = new([numKinds]int)
		if s.counts == nil {
			s.all, s.counts = map[*openRequest]struct{}{}, map[openKey]*[numKinds]int{}
		}
		s.counts[k] = c
	}
	if limit > 0 && c[r.kind] >= limit {
		if *c == ([numKinds]int{}) {
			delete(s.counts, k)
		}
		return false
	}
	c[r.kind]++
	s.all[r] = struct{}{}
	return true
}

func (s *openSet) remove(r *openRequest) {
	if r.timer != nil {
		r.timer.Stop()
	}
	k := openKey{r.cluster, r.person.Name}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.all[r]; !ok {
		return
	}
	delete(s.all, r)
	c := s.counts[k]
	c[r.kind]--
	if *c == ([numKinds]int{}) {
		delete(s.counts, k)
	}
}

// matching returns the open requests for which keep is true.
func (s *openSet) matching(keep func(*openRequest) bool) []*openRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*openRequest
	for r := range s.all {
		if keep(r) {
			out = append(out, r)
		}
	}
	return out
}

// count is how many of kind person holds open on cluster.
func (s *openSet) count(cluster, person string, kind openKind) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.counts[openKey{cluster, person}]; c != nil {
		return c[kind]
	}
	return 0
}

// openKindOf says which bound r counts against. path is the path on the
// API server.
func openKindOf(r *http.Request, path string) openKind {
	switch {
	case r.Header.Get("Upgrade") != "":
		return kindSession
	case r.Method == http.MethodGet && isWatch(path, r.URL.RawQuery):
		return kindWatch
	}
	return kindRequest
}

// The defaults of the bounds on what one person holds open on one cluster
// at once. Argo CD holds a watch per kind it manages (100 and more) and
// lists up to 50 at once; Lens and k9s hold dozens of watches and a few
// port-forwards. Each open request costs the hub tens of KiB and a stream
// of the agent's tunnel.
const (
	DefaultMaxRequests = 100
	DefaultMaxWatches  = 500
	DefaultMaxSessions = 50
)

// The settings of the bounds, which their refusals name.
const (
	SettingMaxRequests = "TETHER_MAX_REQUESTS_PER_PERSON"
	SettingMaxWatches  = "TETHER_MAX_WATCHES_PER_PERSON"
	SettingMaxSessions = "TETHER_MAX_SESSIONS_PER_PERSON"
)

// openLimit is the bound on kind for p: the users list's for them, else
// the hub's.
func (px *Proxy) openLimit(p auth.Person, kind openKind) int {
	own := px.cfg.Auth.Limits(p)
	pick := func(own, hub, def int) int {
		switch {
		case own > 0:
			return own
		case hub > 0:
			return hub
		}
		return def
	}
	switch kind {
	case kindRequest:
		return pick(own.Requests, px.cfg.Limits.Requests, DefaultMaxRequests)
	case kindWatch:
		return pick(own.Watches, px.cfg.Limits.Watches, DefaultMaxWatches)
	case kindSession:
		return pick(own.Sessions, px.cfg.Limits.Sessions, DefaultMaxSessions)
	}
	return 0
}

// openTooMany answers a request past its person's bound: 429, which
// client-go retries after Retry-After, as it does the API server's own.
func (px *Proxy) openTooMany(w http.ResponseWriter, cluster string, kind openKind, limit int) {
	what, setting, key := "requests", SettingMaxRequests, "requests"
	switch kind {
	case kindWatch:
		what, setting, key = "watches", SettingMaxWatches, "watches"
	case kindSession:
		what, setting, key = "upgraded sessions (exec, attach, port-forward)", SettingMaxSessions, "sessions"
	}
	px.metrics.limitRefusals.WithLabelValues(cluster, key).Inc()
	w.Header().Set("Retry-After", "1")
	WriteStatus(w, http.StatusTooManyRequests, "TooManyRequests", fmt.Sprintf(
		"Tether lets one person hold at most %d %s open at once on cluster %q, and you hold that many: end some, or ask the hub's operator for more (%s, or limits.%s of your entry in the users list).",
		limit, what, cluster, setting, key))
}

// track registers r, ending it when its person's credential expires.
func (px *Proxy) track(r *openRequest, limit int) bool {
	if !px.open.add(r, limit) {
		return false
	}
	if exp := r.person.Expires(); !exp.IsZero() {
		// A token auth still accepts just past its expiry (the leeway
		// between replicas' clocks) gets that long, not an answer cut at
		// once.
		d := time.Until(exp)
		if d <= 0 {
			d = expiredGrace
		}
		r.timer = time.AfterFunc(d, func() { r.end(endedExpired) })
	}
	return true
}

// expiredGrace is how long a request made with a token already past its
// expiry, which auth accepted within its leeway, may last.
const expiredGrace = 5 * time.Second

// recheckOpen ends the open requests for which which is true (nil: all)
// whose person the hub no longer admits as they were: their credential
// revoked or expired, the cluster no longer visible to them, or their
// groups changed (the cluster would see another identity now).
func (px *Proxy) recheckOpen(which func(*openRequest) bool) {
	if px.cfg.Auth == nil {
		return
	}
	rs := px.open.matching(func(r *openRequest) bool { return which == nil || which(r) })
	// One log line per person and cluster, not per request: a reload may
	// end an Argo CD's hundreds of watches.
	type ended struct{ person, cluster, why string }
	count := map[ended]int{}
	for _, r := range rs {
		if why := px.stillAdmits(r); why != "" {
			r.end(why)
			count[ended{r.person.Name, r.cluster, why}]++
		}
	}
	for e, n := range count {
		where := fmt.Sprintf("on cluster %q", e.cluster)
		if e.cluster == "" {
			where = "to the fleet page (event streams)"
		}
		px.log.Info("Ended a person's open requests", "user", e.person, "cluster", e.cluster, "where", where, "why", e.why, "count", n)
	}
}

// stillAdmits says why r must end now, or "" if it may go on.
func (px *Proxy) stillAdmits(r *openRequest) string {
	p, err := px.cfg.Auth.Recheck(r.person)
	switch {
	case errors.Is(err, auth.ErrExpired):
		return endedExpired
	case err != nil:
		return endedRevoked
	case r.kind == kindEvents:
		return "" // it shows what the person sees now at its next keep-alive
	}
	entry, ok := px.visible(r.cluster, p)
	if !ok {
		return endedRevoked
	}
	if !entry.ForwardToken {
		user, groups := px.cfg.AuthConfig.Impersonated(p)
		if user != r.user || !slices.Equal(groups, r.groups) {
			return endedRevoked
		}
	} else if r.user != "" {
		return endedRevoked // the cluster now takes the person's own token
	}
	return ""
}

// TrackEvents keeps a fleet page's event stream of p's with the open
// requests, with no cluster and no bound, so that signing out or leaving
// the users list ends it at once (cancel), not at its next keep-alive.
// Call untrack when the stream ends.
func (px *Proxy) TrackEvents(p auth.Person, cancel context.CancelCauseFunc) (untrack func()) {
	r := &openRequest{kind: kindEvents, person: p, cancel: cancel}
	px.track(r, 0)
	return func() { px.open.remove(r) }
}

// SignedOut ends what person holds open that their sign-out no longer
// admits: page sessions (event streams), decision 025.
func (px *Proxy) SignedOut(person string) {
	px.recheckOpen(func(o *openRequest) bool { return o.person.Name == person })
}

// Holds returns how many requests, watches and upgraded sessions person
// holds open on cluster now.
func (px *Proxy) Holds(cluster, person string) (requests, watches, sessions int) {
	return px.open.count(cluster, person, kindRequest), px.open.count(cluster, person, kindWatch), px.open.count(cluster, person, kindSession)
}
