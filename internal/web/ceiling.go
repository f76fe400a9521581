package web

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// Under strictMode the agent's service account may impersonate a person
// only for the verbs, resources and namespaces the cluster owner granted
// it as impersonate-on:user-info:<verb> (issue 36). A person's access
// review says what their RBAC allows, not what the ceiling lets through;
// the inventory filter asks both, so the page shows nobody what kubectl
// through the hub would refuse them.
const (
	// ceilingVerb is the verb the agent's account needs to list as a
	// person.
	ceilingVerb = "impersonate-on:user-info:list"
	// ceilingPerson is the accessKey.person of the ceiling's answers, which
	// are the cluster's, not a person's: no person's key (quoted, or
	// "token:…") is like it.
	ceilingPerson = "ceiling"
)

// askCeiling returns whether the ceiling lets the agent's account list
// kind in namespace as a person, kept or asked for as the account itself
// (no impersonation), and whether it knows it. Its answers are kept per
// connection, kind and namespace as a person's are, and shared by every
// person; a review in a namespace counts toward the query's budget, but
// not toward a person's share of the cluster.
func (c *accessCheck) askCeiling(ctx context.Context, kind, namespace string) (allowed, known bool) {
	kd, ok := c.kind(kind)
	if !ok {
		return false, true
	}
	k := accessKey{person: ceilingPerson, kind: kind, namespace: namespace}
	now := time.Now()
	if allowed, ok := c.h.access.get(c.cluster, c.conn, k, now); ok {
		return allowed, true
	}
	if c.failed() != nil {
		return false, false
	}
	if namespace != "" && !c.budget.take() {
		c.leaveOut(fmt.Sprintf("one query sends at most %d access reviews in namespaces: name a namespace, or ask again, as answers are kept %s", c.h.cfg.AccessReviewsPerQuery, c.h.cfg.AccessTTL))
		return false, false
	}
	allowed, err := c.h.sendReview(ctx, c.conn, ceilingVerb, kd, namespace, func(req *http.Request) {
		req.Header.Set("Authorization", c.conn.ServiceAccountAuth())
	})
	if err != nil {
		c.h.log.Debug("Can't ask the cluster what its ceiling allows", "cluster", c.cluster, "kind", kind, "err", err)
		c.fail(err)
		return false, false
	}
	c.h.access.put(c.cluster, c.conn, k, allowed, now)
	return allowed, true
}
