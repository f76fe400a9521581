package kubeproxy

import (
	"net/http"
	"strings"
	"time"

	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/recording"
)

// recordingPlan is the recording an exec or attach gets once its upgrade
// goes through (decision 039).
type recordingPlan struct {
	store *recording.Store
	meta  recording.Meta
}

// planRecording says what recording request r, to cluster for person p,
// is to get: nil unless recordings are on and r is an exec or attach
// with a terminal (or any, with TETHER_RECORDINGS_ALL). The recording
// starts only on the API server's 101, in a protocol it can read.
func (px *Proxy) planRecording(r *http.Request, cluster, id string, p auth.Person) *recordingPlan {
	if px.cfg.Recordings == nil || r.Header.Get("Upgrade") == "" {
		return nil
	}
	path := strings.TrimPrefix(r.URL.Path, px.clusterPrefix(cluster))
	var s AuditRecord
	s.setStream(path, r.URL.RawQuery)
	if s.Pod == "" || s.TTY == nil || !px.cfg.Recordings.Wants(*s.TTY) {
		return nil // not an exec or attach (port-forward has no tty), or no terminal
	}
	ns, _, _ := strings.Cut(strings.TrimPrefix(path, "/api/v1/namespaces/"), "/")
	verb := path[strings.LastIndexByte(path, '/')+1:]
	s.bound()
	return &recordingPlan{store: px.cfg.Recordings, meta: recording.Meta{
		ID: id, Cluster: cluster, Person: p.Name, Verb: verb, Namespace: ns,
		Pod: s.Pod, Container: s.Container, Command: s.Command, TTY: *s.TTY, Time: time.Now(),
	}}
}
