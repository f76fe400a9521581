package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/inventory"
	"github.com/tetherhq/tether/internal/inventory/store"
	"github.com/tetherhq/tether/internal/protocol"
)

// fleetQueryWorkers bounds the clusters a fleet-wide query asks about RBAC
// at once.
const fleetQueryWorkers = 8

// parseQuery reads ?kind=&namespace=&labelSelector=&ready= (SPEC section
// 5). extra, when not nil, says whether a kind that isn't one of
// inventory.Kinds is an extra kind the clusters asked about announce. Its
// errors are for the person who wrote the query.
func parseQuery(r *http.Request, extra func(kind string) bool) (store.Query, error) {
	v := r.URL.Query()
	q := store.Query{Kind: v.Get("kind"), Namespace: v.Get("namespace")}
	if q.Kind == "" {
		return q, fmt.Errorf("kind is required: one of %s, or an extra kind the cluster's agent watches, like configmaps or appprojects.argoproj.io", strings.Join(inventory.KindNames(), ", "))
	}
	if _, ok := inventory.LookupKind(q.Kind); !ok && (extra == nil || !extra(q.Kind)) {
		return q, fmt.Errorf("kind %q is not one Tether keeps: use one of %s, or an extra kind the cluster's agent watches (TETHER_INVENTORY_KINDS_EXTRA), named <resource>.<group>", q.Kind, strings.Join(inventory.KindNames(), ", "))
	}
	if q.Namespace != "" {
		// No namespace has such a name: say so, rather than answer [].
		if errs := validation.IsDNS1123Label(q.Namespace); len(errs) > 0 {
			return q, fmt.Errorf("namespace %q is not a Kubernetes namespace name: %s", q.Namespace, errs[0])
		}
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
func (wb *Web) visiblePerson(w http.ResponseWriter, r *http.Request) (string, auth.Person, bool) {
	p, ok := wb.person(w, r)
	if !ok {
		return "", auth.Person{}, false
	}
	name := r.PathValue("cluster")
	if _, visible := wb.visible(name, p); !visible {
		http.Error(w, fmt.Sprintf("Tether has no cluster %q.", name), http.StatusNotFound)
		return "", auth.Person{}, false
	}
	return name, p, true
}

// ServeResources answers /api/clusters/<name>/resources: one cluster's
// inventory, as much of it as the person could list themselves.
func (wb *Web) ServeResources(w http.ResponseWriter, r *http.Request) {
	name, p, ok := wb.visiblePerson(w, r)
	if !ok {
		return
	}
	if wb.forwarded(w, r, name, p, "/resources") {
		return
	}
	q, err := parseQuery(r, func(kind string) bool {
		_, ok := wb.kindOf(name, kind)
		return ok
	})
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	check := wb.checkAccess(name, p, newReviewBudget(wb.cfg.AccessReviewsPerQuery))
	items, known := wb.cfg.Clusters.Inventory().Select(name, q, check.allow(r.Context()))
	if !known {
		http.Error(w, fmt.Sprintf("Cluster %q has sent no inventory yet.", name), http.StatusServiceUnavailable)
		return
	}
	if err := check.failed(); err != nil {
		// Some of it is left out only because the cluster couldn't be
		// asked: say so, rather than answer with a list that looks whole.
		http.Error(w, fmt.Sprintf("Tether can't ask cluster %q what you may list, so it shows you nothing: %v", name, err), http.StatusServiceUnavailable)
		return
	}
	if why := check.leftOut(q.Kind); why != "" {
		// Past the bounds on access reviews: what was checked, and
		// what wasn't named, as the fleet-wide answer does.
		w.Header().Set(leftOutTrailer, leftOutOf(name, why))
	}
	out := startArray(w)
	for _, it := range items {
		out.add(it)
	}
	out.end()
}

// ServeFleetResources answers /api/resources: the same query over every
// cluster the person may see, in the order of their names.
//
// Clusters are asked fleetQueryWorkers at a time (each may send access
// reviews), and each cluster's items are written as soon as those of the
// clusters before it are: a fleet of thousands, or a reader slower than
// the hub, never has the hub hold the items of more than fleetQueryAhead
// clusters beyond the one it writes, nor the whole answer as JSON.
func (wb *Web) ServeFleetResources(w http.ResponseWriter, r *http.Request) {
	p, ok := wb.person(w, r)
	if !ok {
		return
	}
	names := wb.visibleNames(p)
	q, err := parseQuery(r, func(kind string) bool {
		// An extra kind of any cluster the person may see: the others
		// have none of it, and add nothing to the answer. What another
		// replica's clusters announce, it knows: it is asked.
		for _, name := range names {
			if _, ok := wb.kindOf(name, kind); ok || wb.holder(r, name) != "" {
				return true
			}
		}
		return false
	})
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	pending, wait := wb.fleetAnswers(ctx, r, p, q, names)
	defer wait()
	if wantsNDJSON(r) {
		streamNDJSON(w, pending, cancel)
		return
	}
	w.Header().Set("Trailer", leftOutTrailer)
	out := startArray(w)
	var leftOut []string
	for answer := range pending {
		var c clusterItems
		select {
		case c = <-answer:
		default:
			// The next cluster isn't done: send what is written so far
			// rather than keep the reader waiting for it.
			out.flush()
			c = <-answer
		}
		for _, it := range c.items {
			out.add(it)
		}
		for _, it := range c.raw {
			out.add(it)
		}
		if c.leftOut != "" {
			leftOut = append(leftOut, leftOutOf(c.name, c.leftOut))
		}
		if out.err != nil {
			cancel() // the reader is gone; the rest only drains
		}
	}
	out.end()
	if len(leftOut) > 0 {
		w.Header().Set(leftOutTrailer, strings.Join(leftOut, "; "))
	}
}

// leftOutTrailer names, after a fleet-wide answer, the clusters it leaves
// out, or leaves out part of, and why: an answer of 200 whose list looks
// whole may not be. A cluster's own answer has it as a header.
const leftOutTrailer = "Tether-Left-Out"

// leftOutOf is a cluster's part of leftOutTrailer.
func leftOutOf(cluster, why string) string {
	return cluster + " (" + strings.Join(strings.Fields(why), " ") + ")"
}

// clusterItems is one cluster's part of a fleet-wide answer.
type clusterItems struct {
	items   []store.Item
	raw     []json.RawMessage // or, from another replica, as it wrote them
	name    string
	leftOut string // what of the cluster is left out, and why; "" when nothing
}

// fleetQueryAhead is how many clusters a fleet-wide query may ask about
// ahead of the one whose items it writes.
const fleetQueryAhead = 2 * fleetQueryWorkers

// jsonArray writes a JSON array an element at a time, so that an answer of
// many items is never held whole as JSON. After the first failed write it
// writes nothing more, and err says why.
type jsonArray struct {
	w   http.ResponseWriter
	n   int
	err error
}

// startArray starts a 200 answer that is a JSON array.
func startArray(w http.ResponseWriter) *jsonArray {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	return &jsonArray{w: w}
}

func (a *jsonArray) add(v any) {
	if a.err != nil {
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		a.err = err
		return
	}
	sep := ","
	if a.n == 0 {
		sep = "["
	}
	a.n++
	if _, err := io.WriteString(a.w, sep); err != nil {
		a.err = err
		return
	}
	_, a.err = a.w.Write(b)
}

func (a *jsonArray) flush() {
	if a.err != nil {
		return
	}
	if err := http.NewResponseController(a.w).Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		a.err = err
	}
}

func (a *jsonArray) end() {
	if a.err != nil {
		return
	}
	closing := "]\n"
	if a.n == 0 {
		closing = "[]\n"
	}
	_, a.err = io.WriteString(a.w, closing)
}

// GatewayJSON answers /api/clusters/<name>/gateways?host=.
type GatewayJSON struct {
	Host       string   `json:"host"`
	Gateway    string   `json:"gateway,omitempty"` // namespace/name
	Candidates []string `json:"candidates,omitempty"`
	Error      string   `json:"error,omitempty"`
}

// ServeGateways names the Istio Gateway that serves a host (SPEC section 5).
func (wb *Web) ServeGateways(w http.ResponseWriter, r *http.Request) {
	name, p, ok := wb.visiblePerson(w, r)
	if !ok {
		return
	}
	if wb.forwarded(w, r, name, p, "/gateways") {
		return
	}
	host := r.URL.Query().Get("host")
	if host == "" {
		http.Error(w, "host is required, like ?host=shop.example.com", http.StatusBadRequest)
		return
	}
	// A URL or a host:port would match no gateway, or only a catch-all:
	// a wrong answer given with confidence.
	if errs := validation.IsDNS1123Subdomain(strings.TrimSuffix(strings.ToLower(host), ".")); len(errs) > 0 {
		http.Error(w, fmt.Sprintf("host %q is not a domain name, like shop.example.com: %s", host, errs[0]), http.StatusBadRequest)
		return
	}
	info, known := wb.cfg.Clusters.Inventory().Info(name)
	if !known {
		http.Error(w, fmt.Sprintf("Cluster %q has sent no inventory yet.", name), http.StatusServiceUnavailable)
		return
	}
	check := wb.checkAccess(name, p, newReviewBudget(wb.cfg.AccessReviewsPerQuery))
	gw, candidates, err := wb.cfg.Clusters.Inventory().Gateway(name, host, check.allow(r.Context()))
	if ferr := check.failed(); ferr != nil {
		// The answer would be among what could be checked only.
		writeJSONStatus(w, http.StatusServiceUnavailable, GatewayJSON{Host: host,
			Error: fmt.Sprintf("Tether can't ask cluster %q what you may list: %v", name, ferr)})
		return
	}
	if why := check.leftOut("gateways"); why != "" {
		// As above: a gateway named could lose to one left unchecked.
		w.Header().Set("Retry-After", strconv.Itoa(int(wb.cfg.AccessTTL.Seconds())))
		writeJSONStatus(w, http.StatusTooManyRequests, GatewayJSON{Host: host,
			Error: fmt.Sprintf("Tether can't check which gateways of cluster %q you may list: %s", name, why)})
		return
	}
	out := GatewayJSON{Host: host, Gateway: gw, Candidates: candidates}
	var ambiguous *store.AmbiguousError
	switch {
	case err == nil:
		writeJSON(w, out)
	case errors.Is(err, store.ErrNoGateway), errors.Is(err, store.ErrHiddenGateway):
		// Word for word the same whether no gateway serves the host or
		// only ones the person may not list do: "that you may list" told
		// them that hidden ones exist (issue 33).
		out.Error = fmt.Sprintf("No gateway of cluster %q serves %q%s.", name, host, whyNoGateways(info.Kinds))
		writeJSONStatus(w, http.StatusNotFound, out)
	case errors.As(err, &ambiguous):
		out.Error = err.Error()
		writeJSONStatus(w, http.StatusConflict, out)
	default:
		out.Error = err.Error()
		writeJSONStatus(w, http.StatusInternalServerError, out)
	}
}

// whyNoGateways says, after "no gateway serves the host", why the
// inventory has none to look at, if that is why: the cluster has no Istio,
// or the agent can't watch its gateways.
func whyNoGateways(kinds []protocol.KindState) string {
	for _, k := range kinds {
		switch {
		case k.Kind != "gateways" || k.Error == "":
		case k.Missing:
			return ": the cluster doesn't serve Istio's Gateways (networking.istio.io), so Tether has none to look at"
		case k.Namespace != "":
			return fmt.Sprintf(" among those Tether can watch: it can't watch the Gateways in namespace %q: %s", k.Namespace, k.Error)
		default:
			return ": Tether can't watch the cluster's Gateways: " + k.Error
		}
	}
	return ""
}

// InventoryJSON is what /api/clusters/<name> says of a cluster's inventory
// beyond its summary: when it last changed, and the kinds the agent can't
// watch, with why.
type InventoryJSON struct {
	Updated time.Time `json:"updated"`
	// GatewayTieBreaker is in /api/clusters/<name> alone, for those who
	// may list gateways in its namespace.
	GatewayTieBreaker string        `json:"gatewayTieBreaker,omitempty"`
	Problems          []KindProblem `json:"problems,omitempty"`
	// Truncated says the cluster sent more than the hub keeps of one
	// cluster (a million objects, or 256 MiB of them), and some are left
	// out.
	Truncated bool `json:"truncated,omitempty"`
	// TooLarge, when set, says why the hub keeps none of the cluster's
	// inventory: it took more than its share of TETHER_INVENTORY_MAX_BYTES.
	TooLarge string `json:"tooLarge,omitempty"`
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
func (wb *Web) addInventory(c *ClusterJSON) {
	info, ok := wb.cfg.Clusters.InventoryInfo(c.Name)
	if !ok {
		return
	}
	s := info.Summary
	if s != (store.Summary{}) {
		c.Summary = &s
	}
	// The tie-breaker names a gateway: addTieBreaker shows it to those who
	// may list it, in /api/clusters/<name> alone.
	inv := &InventoryJSON{Updated: info.Updated.UTC(), Truncated: info.Truncated, TooLarge: info.TooLarge}
	for _, k := range info.Kinds {
		if k.Error != "" {
			inv.Problems = append(inv.Problems, KindProblem{Kind: k.Kind, Namespace: k.Namespace, Error: k.Error, Missing: k.Missing})
		}
	}
	sort.SliceStable(inv.Problems, func(i, j int) bool { return !inv.Problems[i].Missing && inv.Problems[j].Missing })
	c.Inventory = inv
}

// addTieBreaker adds to c the agent's gateway tie-breaker, if the person
// may list gateways in its namespace: it names a gateway, which those who
// may list none must not learn of (issue 33).
func (wb *Web) addTieBreaker(ctx context.Context, c *ClusterJSON, p auth.Person) {
	info, ok := wb.cfg.Clusters.InventoryInfo(c.Name)
	if !ok || c.Inventory == nil || info.GatewayTieBreaker == "" {
		return
	}
	ns, _, _ := strings.Cut(info.GatewayTieBreaker, "/")
	if wb.checkAccess(c.Name, p, newReviewBudget(1)).allow(ctx)("gateways", ns) {
		c.Inventory.GatewayTieBreaker = info.GatewayTieBreaker
	}
}
