package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"time"

	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/hub"
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
	// Ceiling is "enforced" when the cluster's API server caps what comes
	// through Tether (the agent's strictMode, SPEC section 9), else "off".
	Ceiling string `json:"ceiling"`
	// Halves is which halves the connected agent runs: "proxy": false
	// when it takes no one's requests (TETHER_PROXY=false), "inventory":
	// false when it streams no inventory. Absent while no agent is
	// connected.
	Halves *hub.Halves `json:"halves,omitempty"`
	// Summary and Inventory are absent until the agent's first inventory
	// snapshot arrives.
	Summary   *store.Summary `json:"summary,omitempty"`
	Inventory *InventoryJSON `json:"inventory,omitempty"`
	// History is the cluster's status changes, newest first: in
	// /api/clusters/<name> alone, where the cluster page reads it.
	History []hub.StatusChange `json:"history,omitempty"`
	// Timeline is the cluster's status over the last 24 h (timeline.go).
	Timeline *TimelineJSON `json:"timeline,omitempty"`
}

func (wb *Web) clusterJSON(st hub.ClusterStatus) ClusterJSON {
	c := ClusterJSON{
		Name:              st.Name,
		Status:            st.Status,
		Message:           st.Message,
		KubernetesVersion: st.KubernetesVersion,
		AgentVersion:      st.AgentVersion,
		Ceiling:           st.Ceiling,
		Halves:            st.Halves,
	}
	if entry, ok := wb.cfg.Clusters.Entry(st.Name); ok && len(entry.Labels) > 0 {
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
	if st.Status == hub.Ready {
		c.Message = ""
	}
	wb.addInventory(&c)
	if wb.timelines != nil {
		c.Timeline = wb.timelines.get(st.Name)
	}
	return c
}

// person authenticates an API request, answering it when it can't be.
// Requests from a browser on another origin are refused: the session
// cookie will be taken here too, and must not work for other sites.
func (wb *Web) person(w http.ResponseWriter, r *http.Request) (auth.Person, bool) {
	if p, ok := assertedPerson(r); ok {
		// Another replica authenticated them (PeerHandler, peer port only).
		return p, true
	}
	if wb.refuseOtherSites(w, r) {
		return auth.Person{}, false
	}
	p, ok, err := wb.cookiePerson(r)
	if err != nil || !ok {
		if err != nil {
			wb.cfg.Proxy.LogAuthFailure(r, err)
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
func (wb *Web) refuseOtherSites(w http.ResponseWriter, r *http.Request) bool {
	if !auth.FromOtherSite(r, wb.cfg.PublicURL, true) {
		return false
	}
	http.Error(w, "Requests from other sites are refused.", http.StatusForbidden)
	return true
}

// visibleClusters returns the clusters p may see, sorted by name.
func (wb *Web) visibleClusters(p auth.Person) []ClusterJSON {
	var out []ClusterJSON
	for _, st := range wb.cfg.Clusters.Clusters() {
		if _, ok := wb.visible(st.Name, p); ok {
			out = append(out, wb.clusterJSON(st))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// visibleNames returns the names of the clusters p may see, sorted.
func (wb *Web) visibleNames(p auth.Person) []string {
	var names []string
	for _, st := range wb.cfg.Clusters.Clusters() {
		if _, ok := wb.visible(st.Name, p); ok {
			names = append(names, st.Name)
		}
	}
	slices.Sort(names)
	return names
}

func (wb *Web) ServeClusters(w http.ResponseWriter, r *http.Request) {
	p, ok := wb.person(w, r)
	if !ok {
		return
	}
	list := wb.visibleClusters(p)
	if list == nil {
		list = []ClusterJSON{}
	}
	writeJSON(w, list)
}

func (wb *Web) ServeClusterJSON(w http.ResponseWriter, r *http.Request) {
	p, ok := wb.person(w, r)
	if !ok {
		return
	}
	name := r.PathValue("cluster")
	st, known := wb.cfg.Clusters.Cluster(name)
	if _, visible := wb.visible(name, p); !known || !visible {
		http.Error(w, fmt.Sprintf("Tether has no cluster %q.", name), http.StatusNotFound)
		return
	}
	// Its inventory is the holder's: the holder answers it all.
	if wb.forwarded(w, r, name, p, "") {
		return
	}
	c := wb.clusterJSON(st)
	wb.addTieBreaker(r.Context(), &c, p)
	c.History = wb.cfg.Clusters.History(name)
	writeJSON(w, c)
}

// ServeEvents streams changes as Server-Sent Events: first every cluster
// the person may see, then each one again when it changes (a "cluster"
// event), until the client goes away. A cluster the stream has shown that
// the person may no longer see (it left the agents list, or its groups no
// longer take them in) gets a "removed" event with its name.
//
// Only a cluster this stream has shown can be removed: a person must not
// learn the name of a cluster they never could see, so the stream keeps
// the set of names it has sent (10,000 names take about 270 KB).
func (wb *Web) ServeEvents(w http.ResponseWriter, r *http.Request) {
	p, ok := wb.person(w, r)
	if !ok {
		return
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no") // nginx ingresses must not buffer the stream
	sub := wb.cfg.Clusters.Subscribe()
	defer sub.Close()
	// Kept with the open requests, so that signing out, or leaving the
	// users list, ends it at once (open.go), not at its next keep-alive.
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	defer wb.cfg.Proxy.TrackEvents(p, cancel)()

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
		visible := wb.visibleClusters(p)
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
	keepAlive := time.NewTicker(wb.cfg.EventsKeepAlive)
	defer keepAlive.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-wb.stopping.Done():
			// The hub is stopping: EventSource connects again, to the
			// next hub, on its own.
			return
		case <-keepAlive.C:
			// Who the stream is for is asked again: a person taken off the
			// users list, or whose token expired, stops getting events; one
			// whose groups changed sees what they see now.
			again, ok, err := wb.cookiePerson(r)
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
		case <-sub.Wake():
			names, all := sub.Take()
			if all {
				if sendAll() != nil {
					return
				}
				continue
			}
			for _, n := range names {
				st, known := wb.cfg.Clusters.Cluster(n)
				var err error
				if _, visible := wb.visible(n, p); known && visible {
					err = send(wb.clusterJSON(st))
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

// visible returns the list entry of cluster name if p may see it.
func (wb *Web) visible(name string, p auth.Person) (fleet.Agent, bool) {
	entry, ok := wb.cfg.Clusters.Entry(name)
	if !ok || !entry.Groups.Allows(p.Groups) {
		return fleet.Agent{}, false
	}
	return entry, true
}

// refusedIdentity reports whether Authenticate knew who the person is but
// refused their name or groups: a 403 that says why, not a 401.
func refusedIdentity(err error) bool { return errors.Is(err, auth.ErrIdentity) }
