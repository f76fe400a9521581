// Package watch is the agent's side of the inventory (SPEC section 5): it
// lists and watches the kinds of inventory.Kinds, and the operator's extra
// kinds (TETHER_INVENTORY_KINDS_EXTRA), in its cluster, as the
// agent's service account, summarizes each object, and streams a snapshot
// and then batched changes to the hub (Watcher.Stream).
//
// It exists apart from the agent so that the list and watch can be tested
// against a real API server without a tunnel, and apart from the hub's
// store because the agent runs it and the hub never does: it does not import
// the store (its tests do, to read what a stream sends as the hub reads it).
package watch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tetherhq/tether/internal/inventory"
	"github.com/tetherhq/tether/internal/protocol"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Config is what a Watcher needs. Logger and Rediscover may be zero.
type Config struct {
	// Host is the API server's https:// URL, CAFile the CA its
	// certificate is checked against, and TokenFile the service account
	// token the agent reads as (read again as it rotates). Besides list
	// and watch, the watcher asks the API server which APIs it serves, and
	// what the agent's own service account may do, so it never starts a
	// watch it would only be refused.
	Host, CAFile, TokenFile string
	// UserAgent goes with every request.
	UserAgent string
	// Namespaces are TETHER_ALLOWED_NAMESPACES: when set, namespaced kinds
	// are watched in each of them separately, and nothing else is seen.
	Namespaces []string
	// ExtraKinds are TETHER_INVENTORY_KINDS_EXTRA
	// (inventory.ParseExtraKinds), watched besides inventory.Kinds and
	// summarized generically.
	ExtraKinds []inventory.Kind
	// Rediscover is how often the agent looks again for APIs that appeared
	// or went away (a CRD installed later) and for permissions it lacked.
	// Zero means a minute.
	Rediscover time.Duration
	// TokenReread is how often the token and CA are read again from their
	// files (TETHER_TOKEN_REREAD_SECONDS). Zero means a minute.
	TokenReread time.Duration
	Logger      *slog.Logger
}

// Watcher runs the agent's reflectors: list and watch, never a write. Run
// keeps them going; Stream sends what they see to one hub connection.
type Watcher struct {
	cfg Config
	log *slog.Logger
	api apiServer

	mu sync.Mutex // guards the following
	// kinds are inventory.Kinds and the extra kinds, these with their
	// scope as discovery last said. Run replaces the slice, never its
	// elements.
	kinds  []inventory.Kind
	scopes map[scope]*running                // running reflectors
	states map[scope]stateOf                 // why a kind isn't watched, per scope
	dirty  map[protocol.ResourceRef]struct{} // changed since the subscriber last took them
	sub    bool                              // a Stream is running
	epoch  uint64                            // bumped when kind states change
	wake   chan struct{}                     // has a value when dirty or epoch changed

	reconciled chan struct{} // closed after the first look at the cluster
	firstOnce  sync.Once
}

// scope is one kind in one namespace ("" for every namespace, and for
// cluster-scoped kinds).
type scope struct {
	kind      string
	namespace string
}

type stateOf struct {
	err     string
	missing bool
}

// running is one running reflector.
type running struct {
	refl    *reflector
	version string // the version it watches
	stop    context.CancelFunc
	done    chan struct{}
}

// New returns a Watcher; call Run to start it.
func New(cfg Config) (*Watcher, error) {
	if cfg.Rediscover == 0 {
		cfg.Rediscover = time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	for _, k := range cfg.ExtraKinds {
		if !k.Extra || k.Group == "" && k.Name == "secrets" {
			return nil, fmt.Errorf("inventory: extra kind %q: %w", k.Name, inventory.ErrSecrets)
		}
	}
	api, err := newAPIServer(cfg)
	if err != nil {
		return nil, fmt.Errorf("inventory client: %w", err)
	}
	return &Watcher{
		cfg:    cfg,
		log:    cfg.Logger,
		api:    api,
		kinds:  append(slices.Clip(inventory.Kinds), cfg.ExtraKinds...),
		scopes: map[scope]*running{},
		states: map[scope]stateOf{},
		dirty:  map[protocol.ResourceRef]struct{}{},
		wake:   make(chan struct{}, 1),

		reconciled: make(chan struct{}),
	}, nil
}

// Run discovers the kinds the cluster serves, starts a reflector for each
// the agent may list, and looks again every Rediscover interval, until ctx
// ends. It returns once every reflector has stopped.
func (w *Watcher) Run(ctx context.Context) {
	t := time.NewTicker(w.cfg.Rediscover)
	defer t.Stop()
	for {
		w.reconcile(ctx)
		w.firstOnce.Do(func() { close(w.reconciled) })
		select {
		case <-ctx.Done():
			w.mu.Lock()
			all := w.scopes
			w.scopes = map[scope]*running{}
			w.mu.Unlock()
			for _, r := range all {
				r.stop()
				<-r.done
			}
			return
		case <-t.C:
		}
	}
}

// reconcile makes the running reflectors match what the cluster serves and
// permits.
func (w *Watcher) reconcile(ctx context.Context) {
	served, err := w.served(ctx)
	if ctx.Err() != nil {
		return // stopping: what discovery says now is only that
	}
	if err != nil && len(served) == 0 {
		w.log.Warn("Can't discover the cluster's APIs; the inventory waits", "err", err)
		w.mu.Lock()
		if len(w.scopes) == 0 {
			// Nothing is watched yet: each kind says why, or the hub would
			// show an empty inventory as a complete one.
			states := map[scope]stateOf{}
			for _, k := range w.kinds {
				states[scope{kind: k.Name}] = stateOf{err: "can't discover the cluster's APIs: " + describe(err)}
			}
			if !reflect.DeepEqual(states, w.states) {
				w.states = states
				w.epoch++
				w.signalLocked()
			}
		}
		w.mu.Unlock()
		return
	}
	if err != nil {
		w.log.Warn("Part of the cluster's API discovery failed; the kinds it didn't find stay as they were", "err", err)
	}
	want := map[scope]bool{}
	states := map[scope]stateOf{}
	for _, k := range w.kinds {
		version, ok := served[k.Resource()]
		if !ok && err != nil {
			// Not found, but the answer was partial (a 429 or a timeout on
			// /apis): the kind may well be served. Stopping its watches
			// would delete its objects from the hub until the next
			// discovery, so what runs goes on and what was said stays.
			w.keepAsItWas(k, want, states, err)
			continue
		}
		if !ok {
			states[scope{kind: k.Name}] = stateOf{missing: true, err: fmt.Sprintf("the cluster doesn't serve %s", k.Resource())}
			continue
		}
		for _, ns := range w.namespacesFor(k) {
			sc := scope{kind: k.Name, namespace: ns}
			w.mu.Lock()
			r, active := w.scopes[sc]
			w.mu.Unlock()
			switch {
			case active && r.version != version:
				// The cluster serves k at another version now (a CRD's
				// old version switched off, or the CRD replaced): the old
				// one would answer 404 for as long as the agent runs.
				// The new reflector starts from what the old one saw, so
				// only what differs goes out.
				r.stop()
				<-r.done
				w.start(ctx, sc, k, version, r.refl)
			case !active:
				if why := w.mayNotList(ctx, k, ns); why != "" {
					states[sc] = stateOf{err: why}
					continue
				}
				w.start(ctx, sc, k, version, nil)
			}
			want[sc] = true
		}
	}

	w.mu.Lock()
	var stopping []*running
	for sc, r := range w.scopes {
		if !want[sc] {
			stopping = append(stopping, r)
			delete(w.scopes, sc)
			w.epoch++
		}
	}
	// Keep the errors of running scopes (a watch refused after it
	// started); replace the rest.
	for sc, st := range w.states {
		if _, active := w.scopes[sc]; active && st.err != "" {
			states[sc] = st
		}
	}
	if !reflect.DeepEqual(states, w.states) {
		w.states = states
		w.epoch++
		w.signalLocked()
	}
	w.mu.Unlock()
	for _, r := range stopping {
		r.stop()
		<-r.done
		// Its objects are gone from the inventory too.
		w.mu.Lock()
		for _, res := range r.refl.all() {
			w.markLocked(res.ResourceRef)
		}
		w.mu.Unlock()
	}
}

// keepAsItWas keeps k's running scopes, and the states of the rest, when a
// discovery that failed in part didn't find k. A kind never seen before
// says why it isn't watched.
func (w *Watcher) keepAsItWas(k inventory.Kind, want map[scope]bool, states map[scope]stateOf, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	known := false
	for sc := range w.scopes {
		if sc.kind == k.Name {
			want[sc], known = true, true
		}
	}
	for sc, st := range w.states {
		if sc.kind == k.Name {
			states[sc], known = st, true
		}
	}
	if !known {
		states[scope{kind: k.Name}] = stateOf{err: fmt.Sprintf("can't discover whether the cluster serves %s: %s", k.Resource(), describe(err))}
	}
}

// served maps each inventory kind the cluster serves to the version to
// watch, and notes the extra kinds' scopes. Only Run calls it.
func (w *Watcher) served(ctx context.Context) (map[schema.GroupResource]string, error) {
	d, err := w.api.discover(ctx, w.kinds)
	served := versionsFor(w.kinds, d)
	if len(w.cfg.ExtraKinds) > 0 {
		kinds := slices.Clone(w.kinds)
		for i, k := range kinds {
			if version, ok := served[k.Resource()]; ok && k.Extra {
				kinds[i].Namespaced, _ = d.namespaced(k.Group, version, k.Plural())
			}
		}
		w.mu.Lock()
		w.kinds = kinds
		w.mu.Unlock()
	}
	return served, err
}

// kind returns the kind called name, as last discovered.
func (w *Watcher) kind(name string) (inventory.Kind, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, k := range w.kinds {
		if k.Name == name {
			return k, true
		}
	}
	return inventory.Kind{}, false
}

func (w *Watcher) namespacesFor(k inventory.Kind) []string {
	if !k.Namespaced || len(w.cfg.Namespaces) == 0 {
		return []string{""}
	}
	return w.cfg.Namespaces
}

// mayNotList asks whether the agent may list and watch k in ns, and says
// why not when it may not.
func (w *Watcher) mayNotList(ctx context.Context, k inventory.Kind, ns string) string {
	for _, verb := range []string{"list", "watch"} {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		allowed, err := w.api.allowed(ctx, verb, k.Group, k.Plural(), ns)
		cancel()
		if err != nil {
			// Cut as every kind's error is: a webhook that refuses every
			// review with a long message, in each namespace, would
			// otherwise make the kinds alone outgrow a message, and the
			// hub would get no inventory at all.
			return protocol.Clip(fmt.Sprintf("can't ask the API server whether the agent may %s %s: %s", verb, k.Name, describe(err)), maxKindError)
		}
		if !allowed {
			where := "in every namespace"
			if ns != "" {
				where = "in namespace " + ns
			}
			if !k.Namespaced {
				where = "(cluster-scoped)"
			}
			return fmt.Sprintf("the agent's service account may not %s %s %s", verb, k.Name, where)
		}
	}
	return ""
}

// start runs a reflector for sc; Run owns it. Its store keeps summaries,
// never whole objects: memory stays small however big the objects are.
// With from, a stopped reflector of sc, it starts from what from saw.
func (w *Watcher) start(ctx context.Context, sc scope, k inventory.Kind, version string, from *reflector) {
	refl := newReflector(w.api, k, version, sc.namespace,
		func(err error) { w.noteErr(sc, err) },
		func(ref protocol.ResourceRef) {
			w.mu.Lock()
			w.markLocked(ref)
			w.mu.Unlock()
		})
	if from != nil {
		from.mu.Lock()
		refl.items = maps.Clone(from.items)
		from.mu.Unlock()
	}
	ictx, stop := context.WithCancel(ctx)
	r := &running{refl: refl, version: version, stop: stop, done: make(chan struct{})}
	w.mu.Lock()
	w.scopes[sc] = r
	w.epoch++ // the kinds watched changed
	w.mu.Unlock()
	go func() {
		defer close(r.done)
		refl.run(ictx)
	}()
}

// maxKindError bounds a kind's error as the agent sends it: a webhook's
// message or an x509 error listing every name can run to kilobytes, and
// the hub cuts any over 4 KiB.
const maxKindError = 1024

// describe is err for people, at most maxKindError bytes. A url.Error
// names the request's whole URL, a watch's query and all, as long as the
// rest together; its path is enough beside the kind.
func describe(err error) string {
	s := err.Error()
	var ue *url.Error
	if errors.As(err, &ue) {
		if u, perr := url.Parse(ue.URL); perr == nil {
			s = strings.Replace(s, ue.Error(), fmt.Sprintf("%s %q: %v", ue.Op, u.Path, ue.Err), 1)
		}
	}
	return protocol.Clip(s, maxKindError)
}

// noteErr records the last list or watch error of sc, or clears it.
func (w *Watcher) noteErr(sc scope, err error) {
	st := stateOf{}
	if err != nil {
		st.err = describe(err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.states[sc] == st {
		return
	}
	if st.err == "" {
		delete(w.states, sc)
	} else {
		w.states[sc] = st
	}
	w.epoch++
	w.signalLocked()
}

func (w *Watcher) markLocked(ref protocol.ResourceRef) {
	if !w.sub {
		return // the next Stream starts with a snapshot anyway
	}
	w.dirty[ref] = struct{}{}
	w.signalLocked()
}

func (w *Watcher) signalLocked() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// kindStates lists every kind's state, sorted; scopes without an error are
// watched.
func (w *Watcher) kindStatesLocked() []protocol.KindState {
	var out []protocol.KindState
	seen := map[scope]bool{}
	for sc, st := range w.states {
		seen[sc] = true
		out = append(out, protocol.KindState{Kind: sc.kind, Namespace: sc.namespace, Error: st.err, Missing: st.missing})
	}
	for sc := range w.scopes {
		if !seen[sc] {
			out = append(out, protocol.KindState{Kind: sc.kind, Namespace: sc.namespace})
		}
	}
	for i := range out {
		for _, k := range w.kinds {
			if k.Extra && k.Name == out[i].Kind {
				out[i].Group, out[i].Resource, out[i].Namespaced = k.Group, k.Plural(), k.Namespaced
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Kind != out[j].Kind {
			return out[i].Kind < out[j].Kind
		}
		return out[i].Namespace < out[j].Namespace
	})
	return out
}
