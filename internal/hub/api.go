package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/inventory/store"
)

// ClusterJSON is a cluster as /api/clusters shows it (SPEC section 4).
// Absent values are omitted.
type ClusterJSON struct {
	Name              string            `json:"name"`
	Labels            map[string]string `json:"labels,omitempty"`
	Status            string            `json:"status"`
	Message           string            `json:"message,omitempty"`
	KubernetesVersion string            `json:"kubernetesVersion,omitempty"`
	AgentVersion      string            `json:"agentVersion,omitempty"`
	ConnectedSince    *time.Time        `json:"connectedSince,omitempty"`
	LastSeen          *time.Time        `json:"lastSeen,omitempty"`
	// Summary and Inventory are absent until the agent's first inventory
	// snapshot arrives.
	Summary   *store.Summary `json:"summary,omitempty"`
	Inventory *InventoryJSON `json:"inventory,omitempty"`
	// History is the cluster's status changes, newest first: in
	// /api/clusters/<name> alone, where the cluster page reads it.
	History []StatusChange `json:"history,omitempty"`
}

func (h *Hub) clusterJSON(st ClusterStatus) ClusterJSON {
	c := ClusterJSON{
		Name:              st.Name,
		Status:            st.Status,
		Message:           st.Message,
		KubernetesVersion: st.KubernetesVersion,
		AgentVersion:      st.AgentVersion,
	}
	if entry, ok := h.cfg.Agents.Lookup(st.Name); ok && len(entry.Labels) > 0 {
		c.Labels = entry.Labels
	}
	if !st.ConnectedSince.IsZero() {
		t := st.ConnectedSince.UTC().Truncate(time.Second)
		c.ConnectedSince = &t
	}
	if !st.LastSeen.IsZero() {
		t := st.LastSeen.UTC().Truncate(time.Second)
		c.LastSeen = &t
	}
	if st.Status == Ready {
		c.Message = ""
	}
	h.addInventory(&c)
	return c
}

// person authenticates an API request, answering it when it can't be.
// Requests from a browser on another origin are refused: the session
// cookie will be taken here too, and must not work for other sites.
func (h *Hub) person(w http.ResponseWriter, r *http.Request) (auth.Person, bool) {
	if h.refuseOtherSites(w, r) {
		return auth.Person{}, false
	}
	p, ok, err := h.cookiePerson(r)
	if err != nil || !ok {
		if err != nil {
			h.logAuthFailure(r, err)
		}
		if refusedIdentity(err) {
			http.Error(w, err.Error(), http.StatusForbidden)
			return auth.Person{}, false
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="tether"`)
		http.Error(w, "Tether doesn't know who you are: sign in first.", http.StatusUnauthorized)
		return auth.Person{}, false
	}
	return p, true
}

// refuseOtherSites answers 403 to a request another site's page made,
// and says whether it did: every endpoint that takes the session cookie
// calls it first, so the cookie works for the hub's own pages only. A link
// followed from elsewhere still opens the hub's pages (navigationsOK).
func (h *Hub) refuseOtherSites(w http.ResponseWriter, r *http.Request) bool {
	if !h.fromOtherSite(r, true) {
		return false
	}
	http.Error(w, "Requests from other sites are refused.", http.StatusForbidden)
	return true
}

// fromOtherSite reports whether a browser sent r for a page not the hub's:
// with another Origin, or with Fetch Metadata that names another site.
// Browsers send Origin on every cross-site request but a plain GET, such as
// an <img> or <script>, and those carry cookies (an auth proxy's too) when
// the cookie is SameSite=None, or when the page is a sibling of the hub's
// host (same-site: SameSite=Lax and Strict cookies go along). So
// Sec-Fetch-Site refuses what Origin leaves out. With navigationsOK, a
// top-level GET is let through all the same: a link to the fleet page, or a
// sign-in's return, comes from another site. Requests without Fetch
// Metadata (kubectl, curl, older browsers) are judged by Origin alone.
func (h *Hub) fromOtherSite(r *http.Request, navigationsOK bool) bool {
	if !h.sameOrigin(r) {
		return true
	}
	switch r.Header.Get("Sec-Fetch-Site") {
	case "cross-site", "same-site":
		return !(navigationsOK && isNavigation(r))
	}
	return false // same-origin, none (typed or bookmarked), or absent
}

// browserWithoutFetchMetadata reports whether r says it comes from a
// browser (every browser's User-Agent starts "Mozilla/", and no page can
// change it) yet has no Sec-Fetch-Site: a browser from before Fetch Metadata
// (Safari before 16.4, Firefox before 90), or one on a plain-HTTP address,
// where browsers send none. Another site's plain GET from such a browser
// carries neither Origin nor Fetch Metadata, so fromOtherSite can't see it.
// kubectl, client-go and curl don't say "Mozilla/". Decision 026.
func browserWithoutFetchMetadata(r *http.Request) bool {
	return r.Header.Get("Sec-Fetch-Site") == "" && strings.HasPrefix(r.Header.Get("User-Agent"), "Mozilla/")
}

// isNavigation reports whether a browser sent r to open a page in a window
// or tab of its own: not in a frame, and by GET, so nothing changes.
func isNavigation(r *http.Request) bool {
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) &&
		r.Header.Get("Sec-Fetch-Mode") == "navigate" && r.Header.Get("Sec-Fetch-Dest") == "document"
}

// sameOrigin reports whether r has no Origin header, or the hub's own.
func (h *Hub) sameOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	pub, err := url.Parse(h.cfg.PublicURL)
	if err != nil || pub.Host == "" {
		return false
	}
	// Browsers leave a scheme's default port out of Origin, whether or not
	// the address they opened named it.
	host := pub.Host
	if port := pub.Port(); port == "443" && pub.Scheme == "https" || port == "80" && pub.Scheme == "http" {
		host = strings.TrimSuffix(host, ":"+port)
	}
	return strings.EqualFold(origin, pub.Scheme+"://"+host)
}

// visibleClusters returns the clusters p may see, sorted by name.
func (h *Hub) visibleClusters(p auth.Person) []ClusterJSON {
	var out []ClusterJSON
	for _, st := range h.Clusters() {
		if _, ok := h.visible(st.Name, p); ok {
			out = append(out, h.clusterJSON(st))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// visibleNames returns the names of the clusters p may see, sorted.
func (h *Hub) visibleNames(p auth.Person) []string {
	var names []string
	for _, st := range h.Clusters() {
		if _, ok := h.visible(st.Name, p); ok {
			names = append(names, st.Name)
		}
	}
	slices.Sort(names)
	return names
}

func (h *Hub) serveClusters(w http.ResponseWriter, r *http.Request) {
	p, ok := h.person(w, r)
	if !ok {
		return
	}
	list := h.visibleClusters(p)
	if list == nil {
		list = []ClusterJSON{}
	}
	writeJSON(w, list)
}

func (h *Hub) serveClusterJSON(w http.ResponseWriter, r *http.Request) {
	p, ok := h.person(w, r)
	if !ok {
		return
	}
	name := r.PathValue("cluster")
	st, known := h.Cluster(name)
	if _, visible := h.visible(name, p); !known || !visible {
		http.Error(w, fmt.Sprintf("Tether has no cluster %q.", name), http.StatusNotFound)
		return
	}
	c := h.clusterJSON(st)
	h.addTieBreaker(r.Context(), &c, p)
	c.History = h.History(name)
	writeJSON(w, c)
}

// serveEvents streams changes as Server-Sent Events: first every cluster
// the person may see, then each one again when it changes (a "cluster"
// event), until the client goes away. A cluster the stream has shown that
// the person may no longer see (it left the agents list, or its groups no
// longer take them in) gets a "removed" event with its name.
//
// Only a cluster this stream has shown can be removed: a person must not
// learn the name of a cluster they never could see, so the stream keeps
// the set of names it has sent (10,000 names take about 270 KB).
func (h *Hub) serveEvents(w http.ResponseWriter, r *http.Request) {
	p, ok := h.person(w, r)
	if !ok {
		return
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no") // nginx ingresses must not buffer the stream
	sub := h.events.subscribe()
	defer h.events.unsubscribe(sub)
	// Kept with the open requests, so that signing out, or leaving the
	// users list, ends it at once (open.go), not at its next keep-alive.
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	open := &openRequest{kind: kindEvents, person: p, cancel: cancel}
	h.track(open, 0)
	defer h.open.remove(open)

	shown := map[string]struct{}{}
	send := func(c ClusterJSON) error {
		shown[c.Name] = struct{}{}
		b, _ := json.Marshal(c)
		_, err := fmt.Fprintf(w, "event: cluster\ndata: %s\n\n", b)
		return err
	}
	remove := func(name string) error {
		if _, ok := shown[name]; !ok {
			return nil
		}
		delete(shown, name)
		b, _ := json.Marshal(RemovedJSON{Name: name})
		_, err := fmt.Fprintf(w, "event: removed\ndata: %s\n\n", b)
		return err
	}
	sendAll := func() error {
		visible := h.visibleClusters(p)
		now := make(map[string]struct{}, len(visible))
		for _, c := range visible {
			now[c.Name] = struct{}{}
		}
		var gone []string
		for n := range shown {
			if _, ok := now[n]; !ok {
				gone = append(gone, n)
			}
		}
		sort.Strings(gone)
		for _, n := range gone {
			if err := remove(n); err != nil {
				return err
			}
		}
		for _, c := range visible {
			if err := send(c); err != nil {
				return err
			}
		}
		return rc.Flush()
	}
	if err := sendAll(); err != nil {
		return
	}
	keepAlive := time.NewTicker(h.cfg.EventsKeepAlive)
	defer keepAlive.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.stopping:
			// The hub is stopping: EventSource connects again, to the
			// next hub, on its own.
			return
		case <-keepAlive.C:
			// Who the stream is for is asked again: a person taken off the
			// users list, or whose token expired, stops getting events; one
			// whose groups changed sees what they see now.
			again, ok, err := h.cookiePerson(r)
			if err != nil || !ok {
				return
			}
			if !slices.Equal(again.Groups, p.Groups) {
				p = again
				if sendAll() != nil {
					return
				}
			}
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil || rc.Flush() != nil {
				return
			}
		case <-sub.wake:
			names, all := sub.take()
			if all {
				if sendAll() != nil {
					return
				}
				continue
			}
			for _, n := range names {
				st, known := h.Cluster(n)
				var err error
				if _, visible := h.visible(n, p); known && visible {
					err = send(h.clusterJSON(st))
				} else {
					err = remove(n)
				}
				if err != nil {
					return
				}
			}
			if rc.Flush() != nil {
				return
			}
		}
	}
}

// RemovedJSON is the data of a "removed" event: a cluster the stream showed
// that the person may no longer see.
type RemovedJSON struct {
	Name string `json:"name"`
}

func writeJSON(w http.ResponseWriter, v any) {
	writeJSONStatus(w, http.StatusOK, v)
}

func writeJSONStatus(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// broker tells event streams which clusters changed. A slow stream never
// holds up the hub: changes pile up as a set of names, collapsed per
// stream, and past a bound the stream is just told to send everything.
type broker struct {
	mu   sync.Mutex // guards subs
	subs map[*subscriber]struct{}
}

type subscriber struct {
	wake chan struct{} // has a value when there is something to take

	mu    sync.Mutex // guards the following
	names map[string]struct{}
	all   bool
}

// maxPending bounds the names a subscriber collects before it is told to
// send everything instead.
const maxPending = 256

func (b *broker) subscribe() *subscriber {
	s := &subscriber{wake: make(chan struct{}, 1), names: map[string]struct{}{}}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.subs == nil {
		b.subs = map[*subscriber]struct{}{}
	}
	b.subs[s] = struct{}{}
	return s
}

func (b *broker) unsubscribe(s *subscriber) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.subs, s)
}

// changed tells every subscriber that cluster name changed.
func (b *broker) changed(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for s := range b.subs {
		s.mu.Lock()
		if len(s.names) >= maxPending {
			s.all = true
		} else {
			s.names[name] = struct{}{}
		}
		s.mu.Unlock()
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// take returns the names changed since the last take, sorted, or all=true.
func (s *subscriber) take() (names []string, all bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.all {
		s.all, s.names = false, map[string]struct{}{}
		return nil, true
	}
	for n := range s.names {
		names = append(names, n)
	}
	s.names = map[string]struct{}{}
	sort.Strings(names)
	return names, false
}
