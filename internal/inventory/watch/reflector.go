package watch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/tetherhq/tether/internal/inventory"
	"github.com/tetherhq/tether/internal/protocol"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// reflector keeps the summaries of one kind in one scope: it lists, then
// watches from the list's resourceVersion (with bookmarks), and lists again
// when the watch's history has expired. It does what client-go's
// informers did for the watcher, with only the summaries kept: client-go's
// packages alone made the agent's binary, and so its memory, megabytes
// larger.
type reflector struct {
	api  apiServer
	kind inventory.Kind
	path string // the collection, like /apis/apps/v1/namespaces/team-a/deployments
	// noteErr records the last list or watch request's error, or nil once
	// one succeeds; changed is called with each object added, changed or
	// removed. Both are called without r.mu held.
	noteErr func(error)
	changed func(protocol.ResourceRef)

	// watchTimeout is the shortest a watch lasts before the API server
	// ends it; each asks for a random time between it and twice it.
	watchTimeout time.Duration
	page         int           // objects per page of a list
	pageBytes    int           // the most one page may be
	pageTimeout  time.Duration // how long one page of a list may take
	// sleep waits d, or less if ctx ends first, and says whether ctx is
	// still going; tests replace it to see the backoffs without waiting.
	sleep func(ctx context.Context, d time.Duration) bool

	tried chan struct{} // closed after the first list ended, listed or not

	mu    sync.Mutex // guards items
	items map[string]protocol.Resource
}

// Paging and timing of list and watch requests, as client-go's reflector
// has them.
const (
	listPage = 500
	// maxPageBytes bounds one page of a list, and so one object: a page
	// is decoded one object at a time, into maps several times its size,
	// and the agent runs in 128 MiB. A page over it is asked for again
	// with half as many objects (Argo CD Applications can be hundreds of
	// KB each, Argo Workflows a megabyte).
	maxPageBytes    = 8 << 20
	listPageTimeout = time.Minute     // an API server that stops answering a list
	watchMinTimeout = 5 * time.Minute // a watch ends after 5 to 10 minutes
	backoffMin      = 800 * time.Millisecond
	backoffMax      = 30 * time.Second
)

func newReflector(api apiServer, k inventory.Kind, version, namespace string, noteErr func(error), changed func(protocol.ResourceRef)) *reflector {
	path := "/apis/" + k.Group + "/" + version
	if k.Group == "" {
		path = "/api/" + version
	}
	if namespace != "" {
		path += "/namespaces/" + url.PathEscape(namespace)
	}
	path += "/" + k.Plural()
	return &reflector{api: api, kind: k, path: path, noteErr: noteErr, changed: changed,
		watchTimeout: watchMinTimeout, page: listPage, pageBytes: maxPageBytes, pageTimeout: listPageTimeout, sleep: sleepTimer, tried: make(chan struct{}), items: map[string]protocol.Resource{}}
}

// sleepTimer waits d on a timer, or less if ctx ends first, and says
// whether ctx is still going. It is how a reflector sleeps but in tests.
func sleepTimer(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// run lists and watches until ctx ends.
func (r *reflector) run(ctx context.Context) {
	backoff := backoffMin
	wait := func() bool {
		d := backoff + rand.N(backoff/2)
		backoff = min(2*backoff, backoffMax)
		return r.sleep(ctx, d)
	}
	// refused: the last watch was refused. A list may still be allowed
	// (a Role that grants list without watch), and succeeding is then no
	// sign the kind works again: the backoff stands until a watch does.
	refused := false
	for ctx.Err() == nil {
		rv, err := r.list(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil || !refused {
			r.noteErr(err) // a refused watch's error stands until a watch works
		}
		select {
		case <-r.tried:
		default:
			close(r.tried) // after noteErr: a snapshot has the error
		}
		if err != nil {
			if forbidden(err) {
				// Its rights were taken away (a Role changed, a namespace
				// and its RoleBinding deleted): what it last saw can't be
				// kept up, so it goes rather than stand as current.
				r.forget()
			}
			if !wait() {
				return
			}
			continue
		}
		if !refused {
			backoff = backoffMin
		}
		for ctx.Err() == nil {
			began := time.Now()
			var gone bool
			rv, gone, err = r.watch(ctx, rv)
			if ctx.Err() != nil {
				return
			}
			if gone {
				break // list again
			}
			if refused = forbidden(err); refused {
				// List again, which says whether it may, after the
				// backoff: lists allowed and watches refused would
				// otherwise follow each other as fast as they go.
				if !wait() {
					return
				}
				break
			}
			// A watch that fails, or ends at once, waits before the next.
			if err != nil || time.Since(began) < time.Second {
				if !wait() {
					return
				}
				continue
			}
			backoff = backoffMin
		}
	}
}

// listRestarts bounds how often one list starts again after its
// continue token expired.
const listRestarts = 3

// expired says whether err is the API server's 410 Gone, which a page
// whose continue token is too old gets.
func expired(err error) bool {
	var se *statusError
	return errors.As(err, &se) && se.code == http.StatusGone
}

// forbidden says whether err is the API server's 403.
func forbidden(err error) bool {
	var se *statusError
	return errors.As(err, &se) && se.code == http.StatusForbidden
}

// forget drops every summary, and reports each as changed (now gone).
func (r *reflector) forget() {
	r.mu.Lock()
	items := r.items
	r.items = map[string]protocol.Resource{}
	r.mu.Unlock()
	for _, res := range items {
		r.changed(res.ResourceRef)
	}
}

// list reads the whole collection, page by page, replaces the summaries
// with it, and returns its resourceVersion.
func (r *reflector) list(ctx context.Context) (string, error) {
	fresh := map[string]protocol.Resource{}
	cont, rv := "", ""
	restarts := 0
	for {
		q := url.Values{"limit": {strconv.Itoa(r.page)}}
		if r.kind.FieldSelector != "" {
			q.Set("fieldSelector", r.kind.FieldSelector)
		}
		if cont != "" {
			q.Set("continue", cont)
		}
		// Each object is summarized as it is decoded, and the page's
		// summaries join the list's only once the page is whole.
		page := map[string]protocol.Resource{}
		// A page is bounded, so a page that takes this long is an API
		// server that stopped answering: give up, and list again later,
		// rather than wait on it for ever.
		pctx, cancel := context.WithTimeout(ctx, r.pageTimeout)
		meta, err := r.api.getEach(pctx, r.path+"?"+q.Encode(), r.pageBytes, func(o map[string]any) {
			key, res := r.summarize(o)
			if res.Name == "" {
				return // unnamed: see summarize
			}
			page[key] = res
		})
		cancel()
		if errors.Is(err, errAnswerTooLarge) && r.page > 1 {
			r.page /= 2 // and kept so for this kind's later lists
			continue
		}
		if err != nil {
			if cont != "" && expired(err) && restarts < listRestarts {
				// The continue token is too old: etcd compacted the
				// revision the list began at (every 5 minutes in a
				// cluster, or sooner), which a long list of many pages
				// outlives. As the API server says, start again without
				// it, now: a list that fails waits out a backoff, and
				// goes out in the snapshot as the kind's error.
				restarts++
				fresh, cont = map[string]protocol.Resource{}, ""
				continue
			}
			return "", err
		}
		maps.Copy(fresh, page)
		rv, cont = meta.ResourceVersion, meta.Continue
		if cont == "" {
			break
		}
	}
	var changed []protocol.ResourceRef
	r.mu.Lock()
	for key, old := range r.items {
		if _, ok := fresh[key]; !ok {
			changed = append(changed, old.ResourceRef)
		}
	}
	for key, res := range fresh {
		if old, ok := r.items[key]; !ok || !reflect.DeepEqual(old, res) {
			changed = append(changed, res.ResourceRef)
		}
	}
	r.items = fresh
	r.mu.Unlock()
	for _, ref := range changed {
		r.changed(ref)
	}
	return rv, nil
}

// watchEvent is one line of a watch.
type watchEvent struct {
	Type   string         `json:"type"`
	Object map[string]any `json:"object"`
}

// watch follows the collection from rv until the watch ends, and returns
// the last resourceVersion seen. gone says the API server no longer has
// rv's history: list again.
func (r *reflector) watch(ctx context.Context, rv string) (last string, gone bool, err error) {
	timeout := r.watchTimeout + rand.N(r.watchTimeout)
	q := url.Values{"watch": {"1"}, "resourceVersion": {rv}, "allowWatchBookmarks": {"true"},
		"timeoutSeconds": {strconv.Itoa(int(timeout / time.Second))}}
	if r.kind.FieldSelector != "" {
		q.Set("fieldSelector", r.kind.FieldSelector)
	}
	// The API server ends the watch; a connection gone quiet without
	// closing ends a minute after it should have.
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, timeout+time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", r.api.host+r.path+"?"+q.Encode(), nil)
	if err != nil {
		return rv, false, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := r.api.client.Do(req)
	if err != nil {
		// A reflector being stopped (its kind gone from the cluster) says
		// nothing: its last word, "not served", stands.
		if parent.Err() == nil {
			r.noteErr(err)
		}
		return rv, false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		err := readStatusError(resp, "GET "+r.path)
		if resp.StatusCode == http.StatusGone {
			return rv, true, err
		}
		r.noteErr(err)
		return rv, false, err
	}
	r.noteErr(nil)
	return r.follow(ctx, resp.Body, rv)
}

// errEventTooLarge ends a watch whose next event is over the reflector's
// pageBytes: one object can't be larger than a page of a list may be.
var errEventTooLarge = errors.New("a watch event is larger than the agent reads")

// follow applies the watch events read from body, until it ends, and
// returns the last resourceVersion seen, as watch does. An event is read
// whole before it is applied, so each may be at most pageBytes: a stream
// that never ends one would otherwise take all the agent's memory.
func (r *reflector) follow(ctx context.Context, body io.Reader, rv string) (last string, gone bool, err error) {
	var dec *json.Decoder
	dec = json.NewDecoder(&eventLimit{r: body, max: int64(r.pageBytes), at: func() int64 { return dec.InputOffset() }})
	for {
		var ev watchEvent
		if err := dec.Decode(&ev); err != nil {
			if errors.Is(err, errEventTooLarge) {
				err = fmt.Errorf("watch %s: %w (%d bytes)", r.path, err, r.pageBytes)
				r.noteErr(err)
				return rv, false, err
			}
			if ctx.Err() != nil || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return rv, false, nil
			}
			return rv, false, fmt.Errorf("watch %s: %w", r.path, err)
		}
		switch ev.Type {
		case "ADDED", "MODIFIED", "DELETED":
			key, res := r.summarize(ev.Object)
			if res.Name == "" {
				continue // unnamed: see summarize
			}
			r.mu.Lock()
			old, had := r.items[key]
			if ev.Type == "DELETED" {
				delete(r.items, key)
			} else {
				r.items[key] = res
			}
			r.mu.Unlock()
			if ev.Type == "DELETED" || !had || !reflect.DeepEqual(old, res) {
				r.changed(res.ResourceRef)
			}
			if v := objectRV(ev.Object); v != "" {
				rv = v
			}
		case "BOOKMARK":
			if v := objectRV(ev.Object); v != "" {
				rv = v
			}
		case "ERROR":
			// A metav1.Status; 410 Gone: the history is compacted.
			code, _ := ev.Object["code"].(float64)
			msg, _ := ev.Object["message"].(string)
			if code == http.StatusGone {
				return rv, true, nil
			}
			err := fmt.Errorf("watch %s: %s", r.path, msg)
			r.noteErr(err)
			return rv, false, err
		}
	}
}

// eventLimit reads a watch for its decoder, and fails once the decoder
// holds more than max bytes it hasn't finished decoding (at says how far it
// has): one event that large, or the start of one.
type eventLimit struct {
	r    io.Reader
	max  int64
	at   func() int64
	read int64
}

func (l *eventLimit) Read(p []byte) (int, error) {
	if l.read-l.at() > l.max {
		return 0, errEventTooLarge
	}
	n, err := l.r.Read(p)
	l.read += int64(n)
	return n, err
}

func objectRV(o map[string]any) string {
	s, _, _ := unstructured.NestedString(o, "metadata", "resourceVersion")
	return s
}

// summarize returns the store key (namespace/name) and summary of o. An
// object without a name, which no API server sends, is unnamed: left out,
// as the hub refuses an update with one, and with it the whole inventory.
func (r *reflector) summarize(o map[string]any) (string, protocol.Resource) {
	u := &unstructured.Unstructured{Object: o}
	key := u.GetName()
	if ns := u.GetNamespace(); ns != "" {
		key = ns + "/" + key
	}
	return key, Summarize(r.kind, u)
}

// lookup returns the summary stored under key.
func (r *reflector) lookup(key string) (protocol.Resource, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	res, ok := r.items[key]
	return res, ok
}

// keys returns the store keys of every summary.
func (r *reflector) keys() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Collect(maps.Keys(r.items))
}

// all returns every summary.
func (r *reflector) all() []protocol.Resource {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]protocol.Resource, 0, len(r.items))
	for _, res := range r.items {
		out = append(out, res)
	}
	return out
}
