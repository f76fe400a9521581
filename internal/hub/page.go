package hub

import (
	"embed"
	"html/template"
	"io/fs"
	"net/http"
	"sort"
	"strings"
)

// web holds the fleet page: server-rendered HTML with a little plain
// JavaScript that keeps it live. Nothing to build, nothing from a CDN.
//
//go:embed web
var web embed.FS

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"labels": func(m map[string]string) string {
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
	},
}).ParseFS(web, "web/*.html"))

// staticFiles serves the page's CSS and JavaScript.
func staticFiles() http.Handler {
	sub, _ := fs.Sub(web, "web")
	return http.FileServerFS(sub)
}

// servePage serves the fleet page to a signed-in person, the sign-in form
// to anyone else.
func (h *Hub) servePage(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'")
	p, _, ok, err := h.cookiePerson(r)
	if err != nil || !ok {
		h.renderLogin(w, r, "", http.StatusOK)
		return
	}
	data := struct {
		Base     string
		Person   string
		Clusters []ClusterJSON
		Empty    ClusterJSON
	}{Base: h.pageBase(), Person: p.Name, Clusters: h.visibleClusters(p)}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	pages.ExecuteTemplate(w, "fleet.html", data)
}

func (h *Hub) renderLogin(w http.ResponseWriter, r *http.Request, message string, code int) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	pages.ExecuteTemplate(w, "login.html", struct {
		Base, Error string
		OIDC        bool
	}{h.pageBase(), message, h.cfg.Auth.OIDCEnabled()})
}

// pageBase is the base path with one trailing slash, as links need it.
func (h *Hub) pageBase() string { return strings.TrimSuffix(h.cfg.BasePath, "/") + "/" }

// serveClusterPage shows one cluster: its status, labels and status
// history (its inventory will join them).
func (h *Hub) serveClusterPage(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'")
	p, _, ok, err := h.cookiePerson(r)
	if err != nil || !ok {
		h.renderLogin(w, r, "", http.StatusOK)
		return
	}
	name := r.PathValue("cluster")
	st, known := h.Cluster(name)
	if _, visible := h.visible(name, p); !known || !visible {
		http.Error(w, "Tether has no cluster \""+name+"\".", http.StatusNotFound)
		return
	}
	data := struct {
		Base    string
		Person  string
		Cluster ClusterJSON
		History []StatusChange
	}{h.pageBase(), p.Name, h.clusterJSON(st), h.History(name)}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	pages.ExecuteTemplate(w, "cluster.html", data)
}
