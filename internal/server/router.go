package server

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/tetherhq/tether/internal/kubeproxy"
	"github.com/tetherhq/tether/internal/web"
)

// Handler serves the hub's public endpoints below its base path, and
// /healthz and /readyz at the root too, where Kubernetes probes them.
func (h *Hub) Handler() http.Handler {
	mux := http.NewServeMux()
	base := strings.TrimSuffix(h.cfg.BasePath, "/")
	mux.HandleFunc(base+"/api/agent", h.registry.ServeAgent)
	if h.cfg.Auth != nil {
		mux.Handle(base+"/clusters/{cluster}/{path...}", h.proxy)
		mux.Handle(base+"/clusters/{cluster}", h.proxy)
		mux.HandleFunc("GET "+base+"/api/kubeconfig", h.web.ServeKubeconfig)
		mux.HandleFunc("GET "+base+"/api/clusters", h.web.ServeClusters)
		mux.HandleFunc("GET "+base+"/api/clusters/{cluster}", h.web.ServeClusterJSON)
		mux.HandleFunc("GET "+base+"/api/clusters/{cluster}/resources", h.web.ServeResources)
		mux.HandleFunc("GET "+base+"/api/clusters/{cluster}/gateways", h.web.ServeGateways)
		mux.HandleFunc("GET "+base+"/api/clusters/{cluster}/domains", h.web.ServeDomains)
		mux.HandleFunc("GET "+base+"/api/clusters/{cluster}/events", h.web.ServeObjectEvents)
		mux.HandleFunc("GET "+base+"/api/clusters/{cluster}/recordings", h.web.ServeRecordings)
		mux.HandleFunc("GET "+base+"/api/clusters/{cluster}/recordings/{id}", h.web.ServeRecording)
		mux.HandleFunc("GET "+base+"/cluster/{cluster}/recordings/{id}", h.web.ServeRecordingPage)
		mux.HandleFunc("GET "+base+"/api/resources", h.web.ServeFleetResources)
		mux.HandleFunc("GET "+base+"/api/events", h.web.ServeEvents)
		mux.HandleFunc("GET "+base+"/{$}", h.web.ServePage)
		mux.HandleFunc("GET "+base+"/cluster/{cluster}", h.web.ServeClusterPage)
		mux.HandleFunc("POST "+base+"/login", h.web.ServeLogin)
		// The address a failed sign-in leaves in the address bar, loaded
		// again: the sign-in form is on the fleet page.
		mux.Handle("GET "+base+"/login", http.RedirectHandler(base+"/", http.StatusSeeOther))
		mux.HandleFunc("POST "+base+"/logout", h.web.ServeLogout)
		// tether login's browser and device sign-ins (decision 038).
		mux.HandleFunc("GET "+base+"/login/cli", h.web.ServeCLILogin)
		mux.HandleFunc("POST "+base+"/api/login/token", h.web.ServeLoginToken)
		mux.HandleFunc("POST "+base+"/api/login/device", h.web.ServeDeviceStart)
		mux.HandleFunc("GET "+base+"/device", h.web.ServeDevicePage)
		mux.HandleFunc("POST "+base+"/device", h.web.ServeDeviceApprove)
		if h.cfg.Auth.OIDCEnabled() {
			mux.HandleFunc("GET "+base+"/login/oidc", h.web.ServeOIDCLogin)
			mux.HandleFunc("GET "+base+"/login/oidc/callback", h.web.ServeOIDCCallback)
		}
		mux.Handle("GET "+base+"/static/", http.StripPrefix(base+"/static/", web.StaticFiles()))
		mux.HandleFunc(base+"/api/", h.serveNoAPI)
		// kubectl 1.33 and older drop the whole path of the server, base
		// path included, from --raw requests.
		for _, p := range []string{"/api", "/api/v1", "/api/v1/", "/apis", "/apis/", "/version", "/openapi/"} {
			mux.HandleFunc(base+p, h.serveNoCluster)
			if base != "" {
				mux.HandleFunc(p, h.serveNoCluster)
			}
		}
	}
	ok := func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) }
	mux.HandleFunc("GET /healthz", ok)
	mux.HandleFunc("GET /readyz", h.serveReady)
	if base != "" {
		mux.HandleFunc("GET "+base+"/healthz", ok)
		mux.HandleFunc("GET "+base+"/readyz", h.serveReady)
	}
	return kubeproxy.CloseUnreadBodies(mux, h.cfg.FormTimeout)
}

// OwnAgentHandler serves the WebSockets of the hub's own agents, for the
// clusters it reaches itself.
func (h *Hub) OwnAgentHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(strings.TrimSuffix(h.cfg.BasePath, "/")+"/api/agent", h.registry.ServeOwnAgent)
	return mux
}

// serveNoCluster answers a Kubernetes API path that names no cluster.
// kubectl 1.33 and older send `get --raw` paths from the server's root,
// leaving out the kubeconfig's /clusters/<name>
// (kubernetes/kubernetes#131165): the answer says so, as a Status kubectl
// shows, instead of net/http's bare 404.
func (h *Hub) serveNoCluster(w http.ResponseWriter, r *http.Request) {
	base := strings.TrimSuffix(h.cfg.BasePath, "/")
	kubeproxy.WriteStatus(w, http.StatusNotFound, "NotFound", fmt.Sprintf(
		"Tether serves each cluster's Kubernetes API under %s/clusters/<name>, and %s names no cluster. "+
			"kubectl 1.33 and older leave the kubeconfig's /clusters/<name> out of --raw paths: "+
			"use kubectl 1.34 or later, or give the whole path, like --raw %s/clusters/<name>%s",
		base, r.URL.Path, base, strings.TrimPrefix(r.URL.Path, base)))
}

// serveNoAPI answers a request under /api/ that none of the hub's
// endpoints takes: a mistyped path, a cluster's name left out
// (/api/clusters/), or a method other than GET, the only one they take.
func (h *Hub) serveNoAPI(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, fmt.Sprintf("Tether's API answers GET only, not %s.", r.Method), http.StatusMethodNotAllowed)
		return
	}
	base := strings.TrimSuffix(h.cfg.BasePath, "/")
	http.Error(w, fmt.Sprintf("Tether has no API at %s. Its API: %s/api/clusters, %s/api/clusters/<name>, "+
		"%s/api/clusters/<name>/resources?kind=…, %s/api/clusters/<name>/gateways?host=…, "+
		"%s/api/clusters/<name>/domains, %s/api/clusters/<name>/events?namespace=…&object=Kind/name, %s/api/resources?kind=…, "+
		"%s/api/events and %s/api/kubeconfig.", r.URL.Path, base, base, base, base, base, base, base, base, base), http.StatusNotFound)
}

func (h *Hub) serveReady(w http.ResponseWriter, r *http.Request) {
	if h.registry.Closing() || h.draining.Load() {
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	}
	w.Write([]byte("ok\n"))
}
