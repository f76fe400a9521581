package web

import (
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/tetherhq/tether/internal/inventory/store"
)

// ndjsonType is the media type of a fleet-wide answer streamed a line at
// a time, for a reader that shows each cluster's items as they come (the
// fleet page's search) rather than waiting for the whole JSON array.
const ndjsonType = "application/x-ndjson"

// wantsNDJSON says whether r asks for the answer as ndjsonType.
func wantsNDJSON(r *http.Request) bool {
	for part := range strings.SplitSeq(r.Header.Get("Accept"), ",") {
		if t, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && t == ndjsonType {
			return true
		}
	}
	return false
}

// streamNDJSON writes a fleet-wide answer as lines, each one JSON object,
// written and flushed as each cluster's answer comes, in the order of the
// clusters' names: {"cluster":…,"item":{…}} for each of its items, then
// {"cluster":…,"end":true} closing the cluster's part, with "leftOut"
// saying what of it is left out and why, as the Tether-Left-Out trailer of
// the JSON answer does (the trailer is sent too). These are the lines
// replicas send each other (peerLine). cancel is called once the reader
// is gone.
func streamNDJSON(w http.ResponseWriter, pending <-chan chan clusterItems, cancel func()) {
	w.Header().Set("Content-Type", ndjsonType)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Trailer", leftOutTrailer)
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	lines := &lineWriter{w: w}
	var leftOut []string
	for answer := range pending {
		c := <-answer
		lines.items(c.name, c.items)
		for _, it := range c.raw {
			lines.write(peerLine{Cluster: c.name, Item: it})
		}
		lines.write(peerLine{Cluster: c.name, End: true, LeftOut: c.leftOut})
		if c.leftOut != "" {
			leftOut = append(leftOut, leftOutOf(c.name, c.leftOut))
		}
		if lines.err == nil {
			if err := rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
				lines.err = err
			}
		}
		if lines.err != nil {
			cancel() // the reader is gone; the rest only drains
		}
	}
	if len(leftOut) > 0 {
		w.Header().Set(leftOutTrailer, strings.Join(leftOut, "; "))
	}
}

// lineWriter writes peerLines, each one JSON object on a line, as
// streamNDJSON and servePeerFleetResources send them. After the first
// failed write it writes nothing more, and err says why.
type lineWriter struct {
	w   io.Writer
	err error
}

func (lw *lineWriter) write(l peerLine) {
	if lw.err != nil {
		return
	}
	b, err := json.Marshal(l)
	if err != nil {
		lw.err = err
		return
	}
	_, lw.err = lw.w.Write(append(b, '\n'))
}

// items writes a line for each of a cluster's items.
func (lw *lineWriter) items(cluster string, items []store.Item) {
	for _, it := range items {
		b, err := json.Marshal(it)
		if err != nil {
			lw.err = err
			return
		}
		lw.write(peerLine{Cluster: cluster, Item: b})
	}
}
