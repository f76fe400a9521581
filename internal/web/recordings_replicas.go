package web

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/recording"
)

// A recording lives on the replica that carried its session (decision
// 039). Every replica lists them all, and serves each: it asks the others,
// as the person, and each answers from its own directory with the same
// rules, never asking further.

// listedRecording is a recording in a listing, with the replica that
// holds it ("" for the one that answers).
type listedRecording struct {
	recording.Meta
	Replica string `json:"replica,omitempty"`
}

// maxPeerRecordings bounds a replica's listing, as read by another.
const maxPeerRecordings = 16 << 20

// othersRecordings asks every other replica for its recordings of cluster
// name, at once, each for at most ReplicaTimeout: it returns what they
// hold, and names those that didn't answer, and why.
func (wb *Web) othersRecordings(r *http.Request, name string, p auth.Person) ([]listedRecording, []string) {
	if wb.cfg.Replicas == nil {
		return nil, nil
	}
	if _, ok := assertedPerson(r); ok {
		return nil, nil // carried once, never again
	}
	var (
		mu      sync.Mutex
		list    []listedRecording
		leftOut []string
		wg      sync.WaitGroup
	)
	for _, replica := range wb.cfg.Replicas.ReplicaNames() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			theirs, err := wb.askRecordings(r.Context(), replica, name, p)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				leftOut = append(leftOut, leftOutOf("replica "+replica, "it didn't answer: "+err.Error()))
				return
			}
			for _, m := range theirs {
				list = append(list, listedRecording{Meta: m, Replica: replica})
			}
		}()
	}
	wg.Wait()
	sort.Strings(leftOut)
	return list, leftOut
}

// askRecordings is one replica's listing of cluster name's recordings.
func (wb *Web) askRecordings(ctx context.Context, replica, name string, p auth.Person) ([]recording.Meta, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, wb.cfg.ReplicaTimeout, fmt.Errorf("it gave nothing for %s", wb.cfg.ReplicaTimeout))
	defer cancel()
	resp, err := wb.askReplica(ctx, replica, http.MethodGet, PeerPath+"clusters/"+url.PathEscape(name)+"/recordings", "", p, nil)
	if err != nil {
		return nil, cause(ctx, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		// Its agents list doesn't let the person see the cluster (yet):
		// nothing of it for them.
		return nil, nil
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("it answered %s", resp.Status)
	}
	var out RecordingsJSON
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxPeerRecordings)).Decode(&out); err != nil {
		return nil, fmt.Errorf("its answer makes no sense: %w", cause(ctx, err))
	}
	metas := make([]recording.Meta, 0, len(out.Recordings))
	for _, m := range out.Recordings {
		metas = append(metas, m.Meta)
	}
	return metas, nil
}

// mergeRecordings puts every replica's recordings in one list, newest
// first, bounded as one replica's is.
func mergeRecordings(lists ...[]listedRecording) []listedRecording {
	out := []listedRecording{}
	for _, l := range lists {
		out = append(out, l...)
	}
	slices.SortStableFunc(out, func(a, b listedRecording) int { return b.Time.Compare(a.Time) })
	if len(out) > recording.MaxListed {
		out = out[:recording.MaxListed]
	}
	return out
}

// othersRecording finds recording id of cluster name on another replica:
// it asks each at once, and returns the answer of the one that has it (the
// caller closes its body), or nil when none does.
func (wb *Web) othersRecording(r *http.Request, name, id string, p auth.Person) *http.Response {
	if wb.cfg.Replicas == nil {
		return nil
	}
	if _, ok := assertedPerson(r); ok {
		return nil
	}
	replicas := wb.cfg.Replicas.ReplicaNames()
	if len(replicas) == 0 {
		return nil
	}
	// Each replica is asked in its own context: the one that has the
	// recording keeps its answer open while the person reads it, and the
	// others are let go as soon as it is found.
	type answer struct {
		resp *http.Response
		i    int
	}
	found := make(chan answer, len(replicas))
	cancels := make([]context.CancelFunc, len(replicas))
	for i, replica := range replicas {
		ctx, cancel := context.WithCancel(r.Context())
		cancels[i] = cancel
		go func() {
			// Only the wait for its headers is bounded: the file then
			// comes as fast as the person reads it.
			slow := time.AfterFunc(wb.cfg.ReplicaTimeout, cancel)
			resp, err := wb.askReplica(ctx, replica, http.MethodGet, PeerPath+"clusters/"+url.PathEscape(name)+"/recordings/"+url.PathEscape(id), "", p, nil)
			slow.Stop()
			if err == nil && resp.StatusCode != http.StatusOK {
				resp.Body.Close()
				err = errNoRecording
			}
			if err != nil {
				cancel()
				found <- answer{}
				return
			}
			found <- answer{resp, i}
		}()
	}
	for n := range replicas {
		a := <-found
		if a.resp == nil {
			continue
		}
		// Request ids are unique: no other replica has it. Let the
		// others go, and close what they answer.
		for i, c := range cancels {
			if i != a.i {
				c()
			}
		}
		go func() {
			for range len(replicas) - n - 1 {
				if other := <-found; other.resp != nil {
					other.resp.Body.Close()
				}
			}
		}()
		resp := a.resp
		resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancels[a.i]}
		return resp
	}
	return nil
}

var errNoRecording = errors.New("it has no such recording")

// cancelOnClose ends a request's context when its answer is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

// relayRecording serves the .cast file another replica answered with.
func relayRecording(w http.ResponseWriter, resp *http.Response) {
	defer resp.Body.Close()
	for _, k := range []string{"Content-Type", "Content-Length", "Content-Range", "Accept-Ranges", "Last-Modified", "Cache-Control", "X-Content-Type-Options", "Content-Security-Policy"} {
		if v := resp.Header.Values(k); len(v) > 0 {
			w.Header()[k] = v
		}
	}
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}

// othersRecordingMeta is the header of recording id held by another
// replica, for its player page.
func (wb *Web) othersRecordingMeta(r *http.Request, name, id string, p auth.Person) (recording.Meta, bool) {
	resp := wb.othersRecording(r, name, id, p)
	if resp == nil {
		return recording.Meta{}, false
	}
	defer resp.Body.Close()
	line, err := bufio.NewReaderSize(resp.Body, 64<<10).ReadSlice('\n')
	if err != nil {
		return recording.Meta{}, false
	}
	var h recording.Header
	if err := json.Unmarshal(line, &h); err != nil || h.Tether.ID != id || h.Tether.Cluster != name {
		return recording.Meta{}, false
	}
	h.Tether.Size = resp.ContentLength
	return h.Tether, true
}

// joinLeftOut is the Tether-Left-Out header of a listing.
func joinLeftOut(leftOut []string) string { return strings.Join(leftOut, "; ") }
