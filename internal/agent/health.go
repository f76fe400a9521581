package agent

import (
	"net/http"
)

// healthHandler answers GET /healthz: 200 while connected to the hub, 503
// otherwise, so Kubernetes can tell a stuck agent from a working one.
func (a *Agent) healthHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if a.Connected() {
			w.Write([]byte("connected\n"))
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte("not connected\n"))
	})
	return mux
}
