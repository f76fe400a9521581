package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"

	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/hub"
	"github.com/tetherhq/tether/internal/inventory/store"
	"github.com/tetherhq/tether/internal/protocol"
	"github.com/tetherhq/tether/internal/testutil/upstream"
)

// oneCluster is Clusters with one cluster, "eu-1", everyone's to see.
type oneCluster struct {
	up  hub.Upstream
	inv *store.Store
}

func (o *oneCluster) Reach(string) hub.Upstream { return o.up }
func (o *oneCluster) Entry(name string) (fleet.Agent, bool) {
	return fleet.Agent{Name: name, Groups: fleet.Groups{Everyone: true}}, name == "eu-1"
}
func (o *oneCluster) Clusters() []hub.ClusterStatus             { return nil }
func (o *oneCluster) Cluster(string) (hub.ClusterStatus, bool)  { return hub.ClusterStatus{}, false }
func (o *oneCluster) History(string) []hub.StatusChange         { return nil }
func (o *oneCluster) Inventory() *store.Store                   { return o.inv }
func (o *oneCluster) InventoryInfo(n string) (store.Info, bool) { return o.inv.Info(n) }
func (o *oneCluster) Subscribe() *hub.Subscription              { return nil }

// reviewer answers access reviews as an API server would, and notes each.
type reviewer struct {
	may func(user, verb, namespace string) bool // user "" is the agent's own account

	mu    sync.Mutex // guards asked
	asked []string   // "user verb namespace"
}

func (rv *reviewer) RoundTrip(r *http.Request) (*http.Response, error) {
	var review authorizationv1.SelfSubjectAccessReview
	if err := json.NewDecoder(r.Body).Decode(&review); err != nil {
		return nil, err
	}
	a := review.Spec.ResourceAttributes
	user := r.Header.Get("Impersonate-User")
	rv.mu.Lock()
	rv.asked = append(rv.asked, user+" "+a.Verb+" "+a.Namespace)
	rv.mu.Unlock()
	review.Status.Allowed = a.Resource == "pods" && rv.may(user, a.Verb, a.Namespace)
	b, _ := json.Marshal(review)
	return &http.Response{StatusCode: http.StatusCreated, Status: "201 Created", Body: io.NopCloser(bytes.NewReader(b)), Header: http.Header{}}, nil
}

func (rv *reviewer) count(who string) int {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	n := 0
	for _, q := range rv.asked {
		if strings.HasPrefix(q, who+" ") {
			n++
		}
	}
	return n
}

// TestCeilingFiltersInventory: under an enforced ceiling, a person whose
// RBAC lets them list pods everywhere sees only those in the namespaces
// where the ceiling lets the agent's account list pods as a person: asked
// as the account itself (no impersonation), with the verb
// impersonate-on:user-info:list, and kept for everyone. Without the
// ceiling, or with the proxy off (whose chart grants the account the
// reviews alone), they see every pod.
func TestCeilingFiltersInventory(t *testing.T) {
	for _, c := range []struct {
		ceiling  string
		proxyOff bool
		want     string
	}{
		{protocol.CeilingEnforced, false, "team-a/web"},
		{protocol.CeilingOff, false, "kube-system/dns team-a/web team-b/db"}, // as Select sorts them
		{protocol.CeilingEnforced, true, "kube-system/dns team-a/web team-b/db"},
	} {
		t.Run(fmt.Sprintf("%s, proxy off %v", c.ceiling, c.proxyOff), func(t *testing.T) {
			rv := &reviewer{may: func(user, verb, namespace string) bool {
				if user == "" {
					return verb == ceilingVerb && namespace == "team-a"
				}
				return verb == "list" // every person may list pods everywhere
			}}
			inv := store.New(store.Config{})
			r := inv.Receiver("eu-1")
			pod := func(ns, name string) protocol.Resource {
				return protocol.Resource{ResourceRef: protocol.ResourceRef{Kind: "pods", Namespace: ns, Name: name}}
			}
			r.Apply(&protocol.Update{Snapshot: true, Complete: true, Kinds: []protocol.KindState{{Kind: "pods"}},
				Upserts: []protocol.Resource{pod("team-a", "web"), pod("team-b", "db"), pod("kube-system", "dns")}}, time.Now())
			wb := New(Config{Clusters: &oneCluster{up: &upstream.Fake{Name: "eu-1", Auth: "Bearer sa", Transport: rv, CeilingIs: c.ceiling, ProxyOff: c.proxyOff}, inv: inv}})
			query := func(who string) string {
				check := wb.checkAccess("eu-1", auth.Person{Name: who}, newReviewBudget(100))
				items, _ := inv.Select("eu-1", store.Query{Kind: "pods"}, check.allow(t.Context()))
				if err := check.failed(); err != nil {
					t.Fatal(err)
				}
				var got []string
				for _, it := range items {
					got = append(got, it.Namespace+"/"+it.Name)
				}
				return strings.Join(got, " ")
			}
			want := c.want
			if got := query("alice"); got != want {
				t.Errorf("alice sees %q, want %q", got, want)
			}
			first := rv.count("")
			if got := query("bob"); got != want {
				t.Errorf("bob sees %q, want %q", got, want)
			}
			if c.ceiling == protocol.CeilingOff || c.proxyOff {
				if first != 0 {
					t.Errorf("%d reviews of the ceiling when none holds", first)
				}
				return
			}
			// Cluster-wide, then each of three namespaces.
			if first != 4 {
				t.Errorf("%d reviews of the ceiling for alice's query, want 4: %v", first, rv.asked)
			}
			if n := rv.count(""); n != first {
				t.Errorf("bob's query asked about the ceiling again (%d reviews, then %d): answers are the cluster's, kept for everyone", first, n)
			}
		})
	}
}
