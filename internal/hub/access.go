package hub

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/inventory"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// maxAccessEntries bounds the cache; past it, it starts over.
const maxAccessEntries = 100_000

// accessCache remembers, per cluster, person, kind and namespace, whether
// the cluster's RBAC lets the person list that kind there.
type accessCache struct {
	ttl time.Duration // how long an answer is kept: Config.AccessTTL

	mu      sync.Mutex // guards entries
	entries map[accessKey]accessEntry
}

type accessKey struct {
	cluster, user, groups, kind, namespace string
}

type accessEntry struct {
	allowed bool
	expires time.Time
}

func (a *accessCache) get(k accessKey, now time.Time) (allowed, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e, ok := a.entries[k]
	if !ok || now.After(e.expires) {
		return false, false
	}
	return e.allowed, true
}

func (a *accessCache) put(k accessKey, allowed bool, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.entries == nil || len(a.entries) >= maxAccessEntries {
		a.entries = map[accessKey]accessEntry{}
	}
	a.entries[k] = accessEntry{allowed: allowed, expires: now.Add(a.ttl)}
}

// allowList returns the inventory.Allow of person p for cluster name: it
// asks the cluster, as p, whether p may list a kind in a namespace, first
// in every namespace (one answer then covers them all), then in the one
// asked about. What can't be asked (the cluster is unreachable, the answer
// is an error) is not allowed, and failed returns the first such error, so
// an answer with things left out for that reason can say so.
func (h *Hub) allowList(ctx context.Context, name string, p auth.Person) (allow inventory.Allow, failed func() error) {
	var mu sync.Mutex
	var firstErr error
	failed = func() error {
		mu.Lock()
		defer mu.Unlock()
		return firstErr
	}
	entry, ok := h.visible(name, p)
	if !ok {
		return func(string, string) bool { return false }, failed
	}
	user, groups := p.Name, p.Groups
	if !entry.ForwardToken {
		user, groups = h.cfg.AuthConfig.Impersonated(p)
		if auth.CheckIdentity(user, groups) != nil {
			return func(string, string) bool { return false }, failed
		}
	}
	base := accessKey{cluster: name, user: user, groups: strings.Join(groups, "\n")}
	if entry.ForwardToken {
		// The answer is about whoever the token says; key it by the token
		// too, so two tokens of one name don't share answers.
		sum := sha256.Sum256([]byte(p.Bearer))
		base.user = "token:" + hex.EncodeToString(sum[:])
	}
	ask := func(kind, namespace string) bool {
		k := base
		k.kind, k.namespace = kind, namespace
		now := time.Now()
		if allowed, ok := h.access.get(k, now); ok {
			return allowed
		}
		if failed() != nil {
			// A review failed already, and the answer says the cluster
			// can't be asked: asking again, for every namespace, would
			// only wait up to ProbeTimeout again each time.
			return false
		}
		allowed, err := h.reviewAccess(ctx, name, entry.ForwardToken, p.Bearer, user, groups, kind, namespace)
		if err != nil {
			h.log.Debug(fmt.Sprintf("Can't ask the cluster what %q may list", user), "cluster", name, "user", user, "kind", kind, "err", err)
			mu.Lock()
			if firstErr == nil {
				firstErr = err
			}
			mu.Unlock()
			return false // not cached: ask again next time
		}
		h.access.put(k, allowed, now)
		return allowed
	}
	return func(kind, namespace string) bool {
		if ask(kind, "") {
			return true
		}
		// Only a namespaced kind is listed in one namespace: a
		// cluster-scoped one that an agent sent with a namespace (none
		// does) counts as cluster-wide.
		k, _ := inventory.LookupKind(kind)
		return namespace != "" && k.Namespaced && ask(kind, namespace)
	}, failed
}

// reviewAccess sends a SelfSubjectAccessReview through the cluster's tunnel
// as the person, and returns the cluster's answer.
func (h *Hub) reviewAccess(ctx context.Context, cluster string, forwardToken bool, bearer, user string, groups []string, kind, namespace string) (bool, error) {
	c := h.connected(cluster)
	if c == nil {
		return false, fmt.Errorf("its agent isn't connected")
	}
	k, ok := inventory.LookupKind(kind)
	if !ok {
		return false, fmt.Errorf("%w %q", inventory.ErrUnknownKind, kind)
	}
	review := authorizationv1.SelfSubjectAccessReview{
		TypeMeta: metav1.TypeMeta{Kind: "SelfSubjectAccessReview", APIVersion: "authorization.k8s.io/v1"},
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: "list", Group: k.Group, Resource: k.Name, Namespace: namespace,
		}},
	}
	body, err := json.Marshal(review)
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(ownRequest(ctx), h.cfg.ProbeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+c.apiHost()+"/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if forwardToken {
		if bearer == "" {
			return false, fmt.Errorf("no token of the person's to forward")
		}
		req.Header.Set("Authorization", "Bearer "+bearer)
	} else {
		req.Header.Set("Authorization", c.serviceAccountAuth())
		req.Header.Set("Impersonate-User", user)
		for _, g := range groups {
			req.Header.Add("Impersonate-Group", g)
		}
	}
	resp, err := c.roundTrip(req)
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
