package hub

import (
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/inventory"
	"k8s.io/apimachinery/pkg/labels"
)

// fleetQueryWorkers bounds the clusters a fleet-wide query asks about RBAC
// at once.
const fleetQueryWorkers = 8

// parseQuery reads ?kind=&namespace=&labelSelector=&ready= (SPEC section
// 5). Its errors are for the person who wrote the query.
func parseQuery(r *http.Request) (inventory.Query, error) {
	v := r.URL.Query()
	q := inventory.Query{Kind: v.Get("kind"), Namespace: v.Get("namespace")}
	if q.Kind == "" {
		return q, fmt.Errorf("kind is required: one of %s", strings.Join(inventory.KindNames(), ", "))
	}
	if _, ok := inventory.LookupKind(q.Kind); !ok {
		return q, fmt.Errorf("kind %q is not one Tether keeps: use one of %s", q.Kind, strings.Join(inventory.KindNames(), ", "))
	}
	if s := v.Get("labelSelector"); s != "" {
		sel, err := labels.Parse(s)
		if err != nil {
			return q, fmt.Errorf("labelSelector %q is not a Kubernetes label selector: %v", s, err)
		}
		q.Selector = sel
	}
	switch v.Get("ready") {
	case "":
	case "true":
		t := true
		q.Ready = &t
	case "false":
		f := false
		q.Ready = &f
	default:
		return q, fmt.Errorf("ready must be true or false, not %q", v.Get("ready"))
	}
	return q, nil
}

// visiblePerson authenticates an API request about the cluster in its path,
// answering it when the person can't be known or may not see the cluster
// (404, as for a cluster that doesn't exist).
func (h *Hub) visiblePerson(w http.ResponseWriter, r *http.Request) (string, auth.Person, bool) {
	p, ok := h.person(w, r)
	if !ok {
		return "", auth.Person{}, false
	}
	name := r.PathValue("cluster")
	if _, visible := h.visible(name, p); !visible {
		http.Error(w, fmt.Sprintf("Tether has no cluster %q.", name), http.StatusNotFound)
		return "", auth.Person{}, false
	}
	return name, p, true
}

// serveResources answers /api/clusters/<name>/resources: one cluster's
// inventory, as much of it as the person could list themselves.
func (h *Hub) serveResources(w http.ResponseWriter, r *http.Request) {
	name, p, ok := h.visiblePerson(w, r)
	if !ok {
		return
	}
	q, err := parseQuery(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	items, known := h.inventory.Select(name, q, h.allowList(r.Context(), name, p))
	if !known {
		http.Error(w, fmt.Sprintf("Cluster %q has sent no inventory yet.", name), http.StatusServiceUnavailable)
		return
	}
	if items == nil {
		items = []inventory.Item{}
	}
	writeJSON(w, items)
}

// serveFleetResources answers /api/resources: the same query over every
// cluster the person may see.
func (h *Hub) serveFleetResources(w http.ResponseWriter, r *http.Request) {
	p, ok := h.person(w, r)
	if !ok {
		return
	}
	q, err := parseQuery(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var names []string
	for _, c := range h.visibleClusters(p) {
		names = append(names, c.Name)
	}
	results := make([][]inventory.Item, len(names))
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(fleetQueryWorkers, len(names)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				results[i], _ = h.inventory.Select(names[i], q, h.allowList(r.Context(), names[i], p))
			}
		}()
	}
	for i := range names {
		next <- i
	}
	close(next)
	wg.Wait()
	all := []inventory.Item{}
	for _, items := range results {
		all = append(all, items...) // names are sorted, and each cluster's items too
	}
	writeJSON(w, all)
}

// GatewayJSON answers /api/clusters/<name>/gateways?host=.
type GatewayJSON struct {
	Host       string   `json:"host"`
	Gateway    string   `json:"gateway,omitempty"` // namespace/name
	Candidates []string `json:"candidates,omitempty"`
	Error      string   `json:"error,omitempty"`
}

// serveGateways names the Istio Gateway that serves a host (SPEC section 5).
func (h *Hub) serveGateways(w http.ResponseWriter, r *http.Request) {
	name, p, ok := h.visiblePerson(w, r)
	if !ok {
		return
	}
	host := r.URL.Query().Get("host")
	if host == "" {
		http.Error(w, "host is required, like ?host=shop.example.com", http.StatusBadRequest)
		return
	}
	if _, known := h.inventory.Info(name); !known {
		http.Error(w, fmt.Sprintf("Cluster %q has sent no inventory yet.", name), http.StatusServiceUnavailable)
		return
	}
	gw, candidates, err := h.inventory.Gateway(name, host, h.allowList(r.Context(), name, p))
	out := GatewayJSON{Host: host, Gateway: gw, Candidates: candidates}
	var ambiguous *inventory.AmbiguousError
	switch {
	case err == nil:
		writeJSON(w, out)
	case errors.Is(err, inventory.ErrNoGateway):
		out.Error = fmt.Sprintf("No gateway of cluster %q serves %q.", name, host)
		writeJSONStatus(w, http.StatusNotFound, out)
	case errors.As(err, &ambiguous):
		out.Error = err.Error()
		writeJSONStatus(w, http.StatusConflict, out)
	default:
		out.Error = err.Error()
		writeJSONStatus(w, http.StatusInternalServerError, out)
	}
}

// InventoryJSON is what /api/clusters/<name> says of a cluster's inventory
// beyond its summary: when it last changed, and the kinds the agent can't
// watch, with why.
type InventoryJSON struct {
	Updated           time.Time     `json:"updated"`
	GatewayTieBreaker string        `json:"gatewayTieBreaker,omitempty"`
	Problems          []KindProblem `json:"problems,omitempty"`
	// Truncated says the cluster sent more objects than the hub keeps of
	// one cluster (a million), and some are left out.
	Truncated bool `json:"truncated,omitempty"`
}

// KindProblem is one kind the agent doesn't watch. Missing means the
// cluster doesn't serve the kind's API, which is often expected (no Argo CD
// here).
type KindProblem struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Error     string `json:"error"`
	Missing   bool   `json:"missing,omitempty"`
}

// addInventory fills in c's summary and inventory from the store.
func (h *Hub) addInventory(c *ClusterJSON) {
	info, ok := h.inventory.Info(c.Name)
	if !ok {
		return
	}
	s := info.Summary
	if s != (inventory.Summary{}) {
		c.Summary = &s
	}
	inv := &InventoryJSON{Updated: info.Updated.UTC(), GatewayTieBreaker: info.GatewayTieBreaker, Truncated: info.Truncated}
	for _, k := range info.Kinds {
		if k.Error != "" {
			inv.Problems = append(inv.Problems, KindProblem{Kind: k.Kind, Namespace: k.Namespace, Error: k.Error, Missing: k.Missing})
		}
	}
	sort.SliceStable(inv.Problems, func(i, j int) bool { return !inv.Problems[i].Missing && inv.Problems[j].Missing })
	c.Inventory = inv
}
