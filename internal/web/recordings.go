package web

import (
	"fmt"
	"net/http"
	"slices"

	"github.com/tetherhq/tether/internal/auth"
)

// RecordingsJSON is GET /api/clusters/{cluster}/recordings: the recordings
// of sessions on the cluster the person may watch (decision 039).
type RecordingsJSON struct {
	// Enabled is false when the hub records nothing (no
	// TETHER_RECORDINGS_DIR).
	Enabled bool `json:"enabled"`
	// Everyone says the list holds everyone's recordings, not only the
	// person's own: they are in a group of TETHER_RECORDINGS_VIEWERS.
	Everyone   bool              `json:"everyone"`
	Recordings []listedRecording `json:"recordings"`
	// LeftOut names the hub replicas whose recordings the list lacks, and
	// why, as the Tether-Left-Out header does.
	LeftOut []string `json:"leftOut,omitempty"`
}

// seesEveryone says whether p watches everyone's recordings.
func (wb *Web) seesEveryone(p auth.Person) bool {
	return slices.ContainsFunc(p.Groups, func(g string) bool { return slices.Contains(wb.cfg.RecordingViewers, g) })
}

// ServeRecordings lists the recordings of a cluster's sessions: the
// person's own, or everyone's for the viewers' groups, and only on a
// cluster whose groups let them in.
func (wb *Web) ServeRecordings(w http.ResponseWriter, r *http.Request) {
	p, ok := wb.person(w, r)
	if !ok {
		return
	}
	name := r.PathValue("cluster")
	if _, known := wb.cfg.Clusters.Cluster(name); !known {
		http.Error(w, fmt.Sprintf("Tether has no cluster %q.", name), http.StatusNotFound)
		return
	}
	if _, visible := wb.visible(name, p); !visible {
		http.Error(w, fmt.Sprintf("Tether has no cluster %q.", name), http.StatusNotFound)
		return
	}
	out := RecordingsJSON{Recordings: []listedRecording{}}
	if wb.cfg.Recordings != nil {
		out.Enabled, out.Everyone = true, wb.seesEveryone(p)
		list, err := wb.cfg.Recordings.List(name, p.Name, out.Everyone)
		if err != nil {
			wb.log.Error("Can't list the recordings", "cluster", name, "err", err)
			http.Error(w, "Tether can't read its recordings now: try again, or tell the hub's operators.", http.StatusInternalServerError)
			return
		}
		own := make([]listedRecording, 0, len(list))
		for _, m := range list {
			own = append(own, listedRecording{Meta: m})
		}
		// The other replicas' recordings too (recordings_replicas.go).
		theirs, leftOut := wb.othersRecordings(r, name, p)
		out.Recordings, out.LeftOut = mergeRecordings(own, theirs), leftOut
		if len(leftOut) > 0 {
			w.Header().Set(leftOutTrailer, joinLeftOut(leftOut))
		}
	}
	writeJSON(w, out)
}

// ServeRecording serves one recording's asciicast file, to its person or
// a viewer: to anyone else it doesn't exist.
func (wb *Web) ServeRecording(w http.ResponseWriter, r *http.Request) {
	p, ok := wb.person(w, r)
	if !ok {
		return
	}
	name, id, ok := wb.recordingAsked(w, r, p)
	if !ok {
		return
	}
	f, m, err := wb.cfg.Recordings.Open(name, id, p.Name, wb.seesEveryone(p))
	if err != nil {
		if resp := wb.othersRecording(r, name, id, p); resp != nil {
			relayRecording(w, resp) // another replica carried the session
			return
		}
		noRecording(w, name, id)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/x-asciicast")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Security-Policy", "sandbox")
	http.ServeContent(w, r, m.ID+".cast", m.Time, f)
}

// recordingAsked returns the cluster and the recording id r's path names.
// When the cluster is unknown or hidden from p, or the hub records
// nothing, it answers 404 and returns false: no replica is asked then.
func (wb *Web) recordingAsked(w http.ResponseWriter, r *http.Request, p auth.Person) (name, id string, ok bool) {
	name, id = r.PathValue("cluster"), r.PathValue("id")
	_, known := wb.cfg.Clusters.Cluster(name)
	if _, visible := wb.visible(name, p); !known || !visible || wb.cfg.Recordings == nil {
		noRecording(w, name, id)
		return "", "", false
	}
	return name, id, true
}

// noRecording answers 404 for recording id of cluster name: what anyone
// is told of a recording that isn't there or that they may not watch.
func noRecording(w http.ResponseWriter, name, id string) {
	http.Error(w, fmt.Sprintf("Tether has no recording %q of cluster %q.", id, name), http.StatusNotFound)
}

// playerCSP is the recording player's page's policy: the page's own, and
// WebAssembly, which asciinema-player's terminal runs on. Every other
// page keeps pageCSP.
const playerCSP = "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; frame-ancestors 'none'"

// ServeRecordingPage plays one recording in the page, with the
// asciinema-player the hub serves itself (static/vendor/).
func (wb *Web) ServeRecordingPage(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", playerCSP)
	p, ok := wb.pagePerson(w, r)
	if !ok {
		return
	}
	name, id, ok := wb.recordingAsked(w, r, p)
	if !ok {
		return
	}
	f, m, err := wb.cfg.Recordings.Open(name, id, p.Name, wb.seesEveryone(p))
	if err == nil {
		f.Close()
	} else if theirs, ok := wb.othersRecordingMeta(r, name, id, p); ok {
		m = theirs // another replica carried the session
	} else {
		noRecording(w, name, id)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	wb.renderPage(w, r, recordingPage(recordingData{wb.pageBase(), p.Name, name, m}))
}
