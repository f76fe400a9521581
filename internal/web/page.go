package web

import (
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/a-h/templ"

	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/hub"
	"github.com/tetherhq/tether/internal/inventory"
	"github.com/tetherhq/tether/internal/inventory/store"
	"github.com/tetherhq/tether/internal/recording"
)

// assets holds the pages' CSS and the little plain JavaScript that keeps them
// live; the HTML is rendered on the server (pages.templ). Nothing from a CDN.
//
//go:embed web
var assets embed.FS

// labelText is a cluster's labels as its card and page show them.
func labelText(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, " ")
}

// labelsJSON is a card's labels for fleet.js's filter: a value may hold
// spaces, which labelText can't tell from the next label's.
func labelsJSON(m map[string]string) (string, error) {
	if m == nil {
		m = map[string]string{}
	}
	b, err := json.Marshal(m)
	return string(b), err
}

// statusIcon shows a status by more than colour.
func statusIcon(status string) string {
	if status == "Ready" {
		return "✔"
	}
	return "✖"
}

// statusText is a status as people see it: Ready, or Unreachable: <why>.
func statusText(c ClusterJSON) string {
	if c.Message == "" {
		return c.Status
	}
	return c.Status + ": " + c.Message
}

// podText names a recording's pod, and its container when it was named.
func podText(m recording.Meta) string {
	s := m.Namespace + "/" + m.Pod
	if m.Container != "" {
		s += " (" + m.Container + ")"
	}
	return s
}

// The pages' data (pages.templ).
type (
	fleetData struct {
		Base     string
		Person   string
		Clusters []ClusterJSON
		Kinds    []string // the search's (search.js)
	}
	loginData struct {
		Base, Error, Next string
		OIDC              bool
	}
	deviceData    struct{ Base, Error, Done, Code, Name string }
	recordingData struct {
		Base, Person, Cluster string
		Recording             recording.Meta
	}
	clusterData struct {
		Base    string
		Person  string
		Cluster ClusterJSON
		History []hub.StatusChange
		Connect Connect
	}
)

// oidcURL starts the identity provider's sign-in, returning to Next after.
func (d loginData) oidcURL() string {
	u := d.Base + "login/oidc"
	if d.Next != d.Base {
		u += "?next=" + url.QueryEscape(d.Next)
	}
	return u
}

// castURL is where the recording's file is.
func (d recordingData) castURL() string {
	return d.Base + "api/clusters/" + d.Cluster + "/recordings/" + d.Recording.ID
}

// renderPage writes a page. A person gone before it was all written is no
// error: there is no one left to tell.
func (wb *Web) renderPage(w http.ResponseWriter, r *http.Request, page templ.Component) {
	if err := page.Render(r.Context(), w); err != nil && r.Context().Err() == nil {
		wb.log.Warn("Can't render a page", "path", r.URL.Path, "err", err)
	}
}

// fact is one number of a card's summary as the page shows it: an icon, so
// that status reads by more than colour, and a text. fleet.js renders the
// same for live updates.
type fact struct {
	Icon, Text string
	Absent     bool // the agent doesn't watch the kind, or sent no inventory
}

// absent is how a card shows a number it doesn't have.
var absent = fact{Text: "—", Absent: true}

// timeFormat is how the pages write a time: 2026-12-03 21:40:05 UTC.
const timeFormat = "2006-01-02 15:04:05 UTC"

// when is the pages' one way to write a time, as live.js's tetherTime does:
// the same in every locale, and no day and month to mix up.
func when(t time.Time) string { return t.UTC().Format(timeFormat) }

// noNodes says why a cluster may have none: an API server alone, as
// `tether dev` runs, has none, and "no nodes" beside "Ready" looks wrong.
const noNodes = "no nodes (an API server without nodes, like tether dev's)"

func nodesFact(s *store.Summary) fact {
	if s == nil || s.NodesTotal == nil || s.NodesReady == nil {
		return absent
	}
	if *s.NodesTotal == 0 {
		return fact{Icon: "⚠", Text: noNodes} // nothing can run
	}
	f := fact{Icon: "✔", Text: fmt.Sprintf("%d / %d ready", *s.NodesReady, *s.NodesTotal)}
	if *s.NodesReady < *s.NodesTotal {
		f.Icon = "⚠"
	}
	return f
}

func podsFact(s *store.Summary) fact {
	if s == nil || s.PodsNotReady == nil {
		return absent
	}
	return countFact(*s.PodsNotReady)
}

func appsFact(s *store.Summary) fact {
	if s == nil || s.AppsOutOfSync == nil {
		return absent
	}
	f := countFact(*s.AppsOutOfSync)
	f.Text += " out of sync or unhealthy"
	return f
}

// countFact shows a count of things that are wrong.
func countFact(n int) fact {
	if n == 0 {
		return fact{Icon: "✔", Text: "0"}
	}
	return fact{Icon: "⚠", Text: fmt.Sprint(n)}
}

// StaticFiles serves the page's CSS and JavaScript, and nothing else of
// web/: no listing.
func StaticFiles() http.Handler {
	sub, _ := fs.Sub(assets, "web")
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch path.Ext(r.URL.Path) {
		case ".css", ".js":
			files.ServeHTTP(w, r)
		default:
			http.NotFound(w, r)
		}
	})
}

// ServePage serves the fleet page to a signed-in person, the sign-in form
// to anyone else.
func (wb *Web) ServePage(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'")
	p, ok := wb.pagePerson(w, r)
	if !ok {
		return
	}
	data := fleetData{Base: wb.pageBase(), Person: p.Name, Clusters: wb.visibleClusters(p), Kinds: inventory.KindNames()}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	wb.renderPage(w, r, fleetPage(data))
}

// pagePerson returns the signed-in person a page is for. Otherwise it
// answers, and returns false: a request from another site is refused, a
// person the hub knows but won't let in gets the sign-in form with the
// reason, anyone else the sign-in form.
func (wb *Web) pagePerson(w http.ResponseWriter, r *http.Request) (auth.Person, bool) {
	if wb.refuseOtherSites(w, r) {
		return auth.Person{}, false
	}
	p, ok, err := wb.cookiePerson(r)
	if refusedIdentity(err) {
		wb.renderLogin(w, r, err.Error(), http.StatusForbidden)
		return auth.Person{}, false
	}
	if err != nil || !ok {
		wb.renderLogin(w, r, "", http.StatusOK)
		return auth.Person{}, false
	}
	return p, true
}

func (wb *Web) renderLogin(w http.ResponseWriter, r *http.Request, message string, code int) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	// Never in another site's frame, where the form could be overlaid.
	w.Header().Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'")
	if code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="tether"`) // as every 401 must
	}
	w.WriteHeader(code)
	// The page asked for, to return to once signed in.
	next := r.URL.Path
	if r.Method != http.MethodGet {
		next = r.PostFormValue("next")
	}
	wb.renderPage(w, r, loginPage(loginData{wb.pageBase(), message, wb.returnTo(next), wb.cfg.Auth.OIDCEnabled()}))
}

// pageBase is the base path with one trailing slash, as links need it.
func (wb *Web) pageBase() string { return strings.TrimSuffix(wb.cfg.BasePath, "/") + "/" }

// ServeClusterPage shows one cluster: its status, labels and status
// history, and its inventory, which cluster.js fetches from the resources
// API (so the person's RBAC applies) and keeps live.
func (wb *Web) ServeClusterPage(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'")
	p, ok := wb.pagePerson(w, r)
	if !ok {
		return
	}
	name := r.PathValue("cluster")
	st, known := wb.cfg.Clusters.Cluster(name)
	if _, visible := wb.visible(name, p); !known || !visible {
		http.Error(w, "Tether has no cluster \""+name+"\".", http.StatusNotFound)
		return
	}
	data := clusterData{wb.pageBase(), p.Name, wb.clusterJSON(st), wb.cfg.Clusters.History(name), connectCommands(wb.cfg.PublicURL, name)}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	wb.renderPage(w, r, clusterPage(data))
}
