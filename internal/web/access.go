package web

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/hub"
	"github.com/tetherhq/tether/internal/inventory"
	"github.com/tetherhq/tether/internal/inventory/store"
	"github.com/tetherhq/tether/internal/protocol"
)

// The bounds on access reviews. An agent decides how many namespaces its
// inventory has, and one query asked once per namespace with matches: an
// agent reporting 20,000 namespaces made a query cost 20,001 reviews (9.5 s,
// 4.5 CPU-seconds of the hub's), and wiped every cluster's cached answers
// (issue 33).
const (
	// DefaultReviewsPerQuery is Config.AccessReviewsPerQuery's default.
	DefaultReviewsPerQuery = 500
	// DefaultReviewsPerPerson is Config.AccessReviewsPerPerson's default.
	DefaultReviewsPerPerson = 1000
	// maxAccessEntries bounds the answers kept, all clusters together, and
	// maxClusterAccessEntries those of one cluster: past its own bound, a
	// cluster's answers start over; past the whole bound, a cluster's new
	// answers are not kept. Neither drops another cluster's answers.
	maxAccessEntries        = 100_000
	maxClusterAccessEntries = 10_000
	// maxAccessPeople bounds the people whose reviews of one cluster are
	// counted before the counts that have run out are dropped.
	maxAccessPeople = 10_000
)

// accessCache remembers, per cluster, person, kind and namespace, whether
// the cluster's RBAC lets the person list that kind there, and counts each
// person's reviews of each cluster. A cluster's answers belong to the agent
// connection that carried them: they are dropped when it ends or another
// takes over, so what an impostor answered doesn't outlive it.
type accessCache struct {
	ttl       time.Duration // how long an answer is kept: Config.AccessTTL
	perPerson int           // reviews a person may have of a cluster each ttl

	mu       sync.Mutex // guards the following
	clusters map[string]*clusterAccess
	entries  int       // answers kept across clusters
	swept    time.Time // when expired answers were last dropped everywhere
}

// clusterAccess is what accessCache keeps of one cluster.
type clusterAccess struct {
	conn    hub.Upstream // whose answers entries are; nil while none is connected
	entries map[accessKey]accessEntry
	people  map[string]*reviewCount // by accessKey.person
}

type accessKey struct {
	person, kind, namespace string
}

type accessEntry struct {
	allowed bool
	expires time.Time
}

// reviewCount counts one person's reviews of one cluster since start.
type reviewCount struct {
	start time.Time
	n     int
}

func newAccessCache(ttl time.Duration, perPerson int) *accessCache {
	return &accessCache{ttl: ttl, perPerson: perPerson, clusters: map[string]*clusterAccess{}}
}

// clusterLocked returns cluster's part, made if need be.
func (a *accessCache) clusterLocked(cluster string) *clusterAccess {
	ca := a.clusters[cluster]
	if ca == nil {
		ca = &clusterAccess{entries: map[accessKey]accessEntry{}, people: map[string]*reviewCount{}}
		a.clusters[cluster] = ca
	}
	return ca
}

// connected makes conn the connection whose answers are kept for cluster,
// dropping those of the one before: what an agent answered about people's
// access is its own, as the next may be an impostor's, or this one was.
// They are dropped when conn ends, too.
func (a *accessCache) connected(cluster string, conn hub.Upstream) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.connectedLocked(cluster, conn)
}

func (a *accessCache) connectedLocked(cluster string, conn hub.Upstream) *clusterAccess {
	ca := a.clusterLocked(cluster)
	a.dropLocked(ca)
	ca.conn = conn
	context.AfterFunc(conn.Context(), func() { a.disconnected(cluster, conn) })
	return ca
}

// disconnected drops cluster's answers if conn carried them.
func (a *accessCache) disconnected(cluster string, conn hub.Upstream) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if ca := a.clusters[cluster]; ca != nil && ca.conn == conn {
		a.dropLocked(ca)
		ca.conn = nil
	}
}

// forget drops all the cache holds of cluster: it left the agents list.
func (a *accessCache) forget(cluster string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if ca := a.clusters[cluster]; ca != nil {
		a.dropLocked(ca)
		delete(a.clusters, cluster)
	}
}

func (a *accessCache) dropLocked(ca *clusterAccess) {
	a.entries -= len(ca.entries)
	ca.entries = map[accessKey]accessEntry{}
}

// get returns the answer kept for k on cluster, if conn carried it and it
// hasn't expired.
func (a *accessCache) get(cluster string, conn hub.Upstream, k accessKey, now time.Time) (allowed, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ca := a.clusters[cluster]
	if ca == nil || ca.conn != conn {
		// The first query since conn connected.
		a.connectedLocked(cluster, conn)
		return false, false
	}
	e, ok := ca.entries[k]
	if !ok || now.After(e.expires) {
		return false, false
	}
	return e.allowed, true
}

// put keeps an answer conn carried, unless conn no longer serves cluster.
func (a *accessCache) put(cluster string, conn hub.Upstream, k accessKey, allowed bool, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ca := a.clusters[cluster]
	if ca == nil || ca.conn != conn {
		return // answered through a connection since gone
	}
	if _, replaces := ca.entries[k]; !replaces {
		if len(ca.entries) >= maxClusterAccessEntries {
			a.sweepLocked(ca, now)
			if len(ca.entries) >= maxClusterAccessEntries {
				a.dropLocked(ca) // its own, and only its own, start over
			}
		}
		if a.entries >= maxAccessEntries && now.Sub(a.swept) >= time.Second {
			// At most once a second: with nothing expired, a sweep of
			// every cluster on each answer would cost more than asking.
			a.swept = now
			for _, c := range a.clusters {
				a.sweepLocked(c, now)
			}
		}
		if a.entries >= maxAccessEntries {
			return // not kept: asked again next time
		}
		a.entries++
	}
	ca.entries[k] = accessEntry{allowed: allowed, expires: now.Add(a.ttl)}
}

// sweepLocked drops ca's expired answers.
func (a *accessCache) sweepLocked(ca *clusterAccess, now time.Time) {
	for k, e := range ca.entries {
		if now.After(e.expires) {
			delete(ca.entries, k)
			a.entries--
		}
	}
}

// spend counts one review by person of cluster, and reports whether it is
// within the person's share of the cluster: perPerson each ttl.
func (a *accessCache) spend(cluster, person string, now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	ca := a.clusterLocked(cluster)
	c := ca.people[person]
	if c == nil || now.Sub(c.start) >= a.ttl {
		if c == nil && len(ca.people) >= maxAccessPeople {
			for p, old := range ca.people {
				if now.Sub(old.start) >= a.ttl {
					delete(ca.people, p)
				}
			}
		}
		c = &reviewCount{start: now}
		ca.people[person] = c
	}
	if c.n >= a.perPerson {
		return false
	}
	c.n++
	return true
}

// reviewBudget is what one query may still send of the reviews in
// namespaces, across all the clusters it covers.
type reviewBudget struct{ left atomic.Int64 }

func newReviewBudget(n int) *reviewBudget {
	b := &reviewBudget{}
	b.left.Store(int64(n))
	return b
}

func (b *reviewBudget) take() bool { return b.left.Add(-1) >= 0 }

func (b *reviewBudget) giveBack() { b.left.Add(1) }

// accessCheck says, for one query of one cluster, what a person may list
// there. It asks the cluster, as the person, first whether they may list
// a kind in every namespace (one answer then covers them all, and is one
// review per cluster however many namespaces it has), then in the one
// asked about. Reviews in namespaces are bounded by the query's budget,
// and every review by the person's share of the cluster: what is past
// either is left out, and leftOut says so. What can't be asked (the cluster
// is unreachable, the answer is an error) is not allowed, and failed
// returns the first such error.
type accessCheck struct {
	h            *Web
	cluster      string
	visible      bool         // the person may see the cluster, as who they are
	conn         hub.Upstream // nil: none was connected
	forwardToken bool
	bearer, user string
	groups       []string
	person       string // accessKey.person
	budget       *reviewBudget
	// ceiling is set when the cluster owner's ceiling holds what the hub
	// does as the person (strictMode, enforced): what it doesn't allow is
	// out of their reach through Tether, whatever their RBAC says.
	ceiling bool

	mu       sync.Mutex           // guards the following
	kinds    map[string]kindFound // the kinds looked up, by name
	err      error                // the first review that failed
	unasked  int                  // namespaces (or a cluster-scoped kind) left out unasked
	whyUnask string
}

// checkAccess returns the accessCheck of person p for cluster name, with
// the query's budget.
func (wb *Web) checkAccess(name string, p auth.Person, budget *reviewBudget) *accessCheck {
	c := &accessCheck{h: wb, cluster: name, budget: budget}
	entry, ok := wb.visible(name, p)
	if !ok {
		return c
	}
	user, groups := p.Name, p.Groups
	if !entry.ForwardToken {
		user, groups = wb.cfg.AuthConfig.Impersonated(p)
		if auth.CheckIdentity(user, groups) != nil {
			return c
		}
	}
	c.forwardToken, c.bearer, c.user, c.groups = entry.ForwardToken, p.Bearer, user, groups
	c.person = fmt.Sprintf("%q%q", user, groups) // quoted: no two people alike
	if entry.ForwardToken {
		// The answer is about whoever the token says; key it by the token
		// too, so two tokens of one name don't share answers.
		sum := sha256.Sum256([]byte(p.Bearer))
		c.person = "token:" + hex.EncodeToString(sum[:])
	}
	c.visible = true
	c.conn = wb.cfg.Clusters.Reach(name)
	if c.conn != nil && !entry.ForwardToken {
		// A person's own token isn't impersonation: no ceiling holds it.
		// Nor does one with the proxy off, where the chart grants the
		// agent's account the access reviews alone (decision 030): no one's
		// requests go through, and the inventory follows people's own RBAC.
		ceiling, _ := c.conn.Ceiling()
		proxy, _ := c.conn.Halves()
		c.ceiling = ceiling == protocol.CeilingEnforced && proxy
	}
	return c
}

// allow is the check as an store.Allow, for a query made with ctx.
func (c *accessCheck) allow(ctx context.Context) store.Allow {
	return func(kind, namespace string) bool {
		if !c.visible {
			return false
		}
		wide, known := c.ask(ctx, kind, "")
		if wide {
			return true
		}
		// Only a namespaced kind is listed in one namespace: a
		// cluster-scoped one that an agent sent with a namespace (none
		// does) counts as cluster-wide.
		k, _ := c.kind(kind)
		if known && namespace != "" && k.Namespaced {
			var allowed bool
			if allowed, known = c.ask(ctx, kind, namespace); allowed {
				return true
			}
		}
		if !known {
			c.mu.Lock()
			c.unasked++
			c.mu.Unlock()
		}
		return false
	}
}

// ask returns the cluster's answer to whether the person may list kind in
// namespace, kept or asked for, and whether it knows it: a review that
// failed, or wasn't sent for the bounds, leaves it unknown.
func (c *accessCheck) ask(ctx context.Context, kind, namespace string) (allowed, known bool) {
	allowed, known = c.askPerson(ctx, kind, namespace)
	if !allowed || !c.ceiling {
		return allowed, known
	}
	return c.askCeiling(ctx, kind, namespace)
}

// askPerson is ask without the ceiling: the person's RBAC alone.
func (c *accessCheck) askPerson(ctx context.Context, kind, namespace string) (allowed, known bool) {
	if c.conn == nil {
		c.fail(errors.New("its agent isn't connected"))
		return false, false
	}
	kd, ok := c.kind(kind)
	if !ok {
		// Not one the cluster announces (any more): nobody may list it,
		// and nothing of it is asked about or kept.
		return false, true
	}
	k := accessKey{person: c.person, kind: kind, namespace: namespace}
	now := time.Now()
	if allowed, ok := c.h.access.get(c.cluster, c.conn, k, now); ok {
		return allowed, true
	}
	if c.failed() != nil {
		// A review failed already, and the answer says the cluster can't
		// be asked: asking again, for every namespace, would only wait up
		// to ProbeTimeout again each time.
		return false, false
	}
	if namespace != "" && !c.budget.take() {
		c.leaveOut(fmt.Sprintf("one query sends at most %d access reviews in namespaces: name a namespace, or ask again, as answers are kept %s", c.h.cfg.AccessReviewsPerQuery, c.h.cfg.AccessTTL))
		return false, false
	}
	if !c.h.access.spend(c.cluster, c.person, now) {
		if namespace != "" {
			c.budget.giveBack() // not sent: another cluster's to send
		}
		c.leaveOut(fmt.Sprintf("a person may have %d access reviews of one cluster every %s: ask again later", c.h.cfg.AccessReviewsPerPerson, c.h.cfg.AccessTTL))
		return false, false
	}
	allowed, err := c.h.reviewAccess(ctx, c.conn, c.forwardToken, c.bearer, c.user, c.groups, kd, namespace)
	if err != nil {
		c.h.log.Debug("Can't ask the cluster what a person may list", "cluster", c.cluster, "user", c.user, "kind", kind, "err", err)
		c.fail(err)
		return false, false // not kept: asked again next time
	}
	c.h.access.put(c.cluster, c.conn, k, allowed, now)
	return allowed, true
}

func (c *accessCheck) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = err
	}
}

func (c *accessCheck) leaveOut(why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.whyUnask == "" {
		c.whyUnask = why
	}
}

// failed returns the first review that failed, or nil.
func (c *accessCheck) failed() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// leftOut says what the check left out unasked, and why; "" when nothing.
func (c *accessCheck) leftOut(kind string) string {
	k, _ := c.kind(kind)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.unasked == 0 {
		return ""
	}
	if !k.Namespaced {
		return fmt.Sprintf("its %s left out, unchecked: %s", kind, c.whyUnask)
	}
	what := "namespaces"
	if c.unasked == 1 {
		what = "namespace"
	}
	return fmt.Sprintf("%d %s with matches left out, unchecked: %s", c.unasked, what, c.whyUnask)
}

// reviewAccess sends a SelfSubjectAccessReview through c, the cluster's
// agent connection, as the person, and returns the cluster's answer.
func (wb *Web) reviewAccess(ctx context.Context, c hub.Upstream, forwardToken bool, bearer, user string, groups []string, k inventory.Kind, namespace string) (bool, error) {
	if forwardToken && bearer == "" {
		return false, fmt.Errorf("no token of the person's to forward")
	}
	return wb.sendReview(ctx, c, "list", k, namespace, func(req *http.Request) {
		if forwardToken {
			req.Header.Set("Authorization", "Bearer "+bearer)
			return
		}
		req.Header.Set("Authorization", c.ServiceAccountAuth())
		req.Header.Set("Impersonate-User", user)
		for _, g := range groups {
			req.Header.Add("Impersonate-Group", g)
		}
	})
}

// sendReview asks the cluster, through c, whether whoever as says may do
// verb on k in namespace.
func (wb *Web) sendReview(ctx context.Context, c hub.Upstream, verb string, k inventory.Kind, namespace string, as func(*http.Request)) (bool, error) {
	review := authorizationv1.SelfSubjectAccessReview{
		TypeMeta: metav1.TypeMeta{Kind: "SelfSubjectAccessReview", APIVersion: "authorization.k8s.io/v1"},
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: verb, Group: k.Group, Resource: k.Plural(), Namespace: namespace,
		}},
	}
	body, err := json.Marshal(review)
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(hub.OwnRequest(ctx), wb.cfg.ReviewTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+c.Host()+"/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	as(req)
	resp, err := c.RoundTrip(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return false, err
	}
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("the API server answered %s", resp.Status)
	}
	var out authorizationv1.SelfSubjectAccessReview
	if err := json.Unmarshal(b, &out); err != nil {
		return false, fmt.Errorf("the API server's answer: %w", err)
	}
	return out.Status.Allowed, nil
}
