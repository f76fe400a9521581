package inventory

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tetherhq/tether/internal/protocol"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// WatcherConfig is what a Watcher needs. Logger and Rediscover may be zero.
type WatcherConfig struct {
	// Rest says how to reach the API server and as whom. Besides list and
	// watch, the watcher asks it which APIs it serves, and what the
	// agent's own service account may do, so it never starts a watch it
	// would only be refused.
	Rest *rest.Config
	// Namespaces are TETHER_ALLOWED_NAMESPACES: when set, namespaced kinds
	// are watched in each of them separately, and nothing else is seen.
	Namespaces []string
	// Rediscover is how often the agent looks again for APIs that appeared
	// or went away (a CRD installed later) and for permissions it lacked.
	// Zero means a minute.
	Rediscover time.Duration
	Logger     *slog.Logger
}

// Watcher runs the agent's informers: list and watch, never a write. Run
// keeps them going; Stream sends what they see to one hub connection.
type Watcher struct {
	cfg WatcherConfig
	log *slog.Logger
	dyn dynamic.Interface
	api apiServer

	mu     sync.Mutex                        // guards the following
	scopes map[scope]*running                // running informers
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

// running is one running informer.
type running struct {
	informer cache.SharedIndexInformer
	stop     context.CancelFunc
	done     chan struct{}
}

// NewWatcher returns a Watcher; call Run to start it.
func NewWatcher(cfg WatcherConfig) (*Watcher, error) {
	if cfg.Rediscover == 0 {
		cfg.Rediscover = time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	hc, err := rest.HTTPClientFor(cfg.Rest)
	if err != nil {
		return nil, fmt.Errorf("inventory client: %w", err)
	}
	dyn, err := dynamic.NewForConfigAndClient(cfg.Rest, hc)
	if err != nil {
		return nil, fmt.Errorf("inventory client: %w", err)
	}
	host, _, err := rest.DefaultServerUrlFor(cfg.Rest)
	if err != nil {
		return nil, fmt.Errorf("inventory client: %w", err)
	}
	return &Watcher{
		cfg:    cfg,
		log:    cfg.Logger,
		dyn:    dyn,
		api:    apiServer{client: hc, host: strings.TrimSuffix(host.String(), "/")},
		scopes: map[scope]*running{},
		states: map[scope]stateOf{},
		dirty:  map[protocol.ResourceRef]struct{}{},
		wake:   make(chan struct{}, 1),

		reconciled: make(chan struct{}),
	}, nil
}

// Run discovers the kinds the cluster serves, starts an informer for each
// the agent may list, and looks again every Rediscover interval, until ctx
// ends. It returns once every informer has stopped.
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

// reconcile makes the running informers match what the cluster serves and
// permits.
func (w *Watcher) reconcile(ctx context.Context) {
	served, err := w.served(ctx)
	if err != nil && len(served) == 0 {
		w.log.Warn("Can't discover the cluster's APIs; the inventory waits", "err", err)
		return
	}
	want := map[scope]bool{}
	states := map[scope]stateOf{}
	for _, k := range Kinds {
		version, ok := served[k.Resource()]
		if !ok {
			states[scope{kind: k.Name}] = stateOf{missing: true, err: fmt.Sprintf("the cluster doesn't serve %s", k.Resource())}
			continue
		}
		for _, ns := range w.namespacesFor(k) {
			sc := scope{kind: k.Name, namespace: ns}
			w.mu.Lock()
			_, active := w.scopes[sc]
			w.mu.Unlock()
			if !active {
				if why := w.mayNotList(ctx, k, ns); why != "" {
					states[sc] = stateOf{err: why}
					continue
				}
				w.start(ctx, sc, k, version)
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
		for _, obj := range r.informer.GetStore().List() {
			w.markLocked(obj.(*item).res.ResourceRef)
		}
		w.mu.Unlock()
	}
}

// served maps each inventory kind the cluster serves to the version to
// watch.
func (w *Watcher) served(ctx context.Context) (map[schema.GroupResource]string, error) {
	d, err := w.api.discover(ctx, Kinds)
	return versionsFor(Kinds, d), err
}

func (w *Watcher) namespacesFor(k Kind) []string {
	if !k.Namespaced || len(w.cfg.Namespaces) == 0 {
		return []string{""}
	}
	return w.cfg.Namespaces
}

// mayNotList asks whether the agent may list and watch k in ns, and says
// why not when it may not.
func (w *Watcher) mayNotList(ctx context.Context, k Kind, ns string) string {
	for _, verb := range []string{"list", "watch"} {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		allowed, err := w.api.allowed(ctx, verb, k.Group, k.Name, ns)
		cancel()
		if err != nil {
			return fmt.Sprintf("can't ask the API server whether the agent may %s %s: %v", verb, k.Name, err)
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

// start runs an informer for sc; Run owns it.
func (w *Watcher) start(ctx context.Context, sc scope, k Kind, version string) {
	res := w.dyn.Resource(schema.GroupVersionResource{Group: k.Group, Version: version, Resource: k.Name}).Namespace(sc.namespace)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			list, err := res.List(ctx, opts)
			w.noteErr(sc, err)
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			wi, err := res.Watch(ctx, opts)
			w.noteErr(sc, err)
			return wi, err
		},
	}
	inf := cache.NewSharedIndexInformerWithOptions(lw, &unstructured.Unstructured{}, cache.SharedIndexInformerOptions{ObjectDescription: k.Name})
	// The store keeps summaries, never whole objects: memory stays small
	// however big the objects are.
	inf.SetTransform(func(obj any) (any, error) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return obj, nil
		}
		return &item{ObjectMeta: metav1.ObjectMeta{Name: u.GetName(), Namespace: u.GetNamespace(), ResourceVersion: u.GetResourceVersion()}, res: Summarize(k, u)}, nil
	})
	// Errors are noted by the list and watch above; the reflector backs
	// off by itself.
	inf.SetWatchErrorHandlerWithContext(func(context.Context, *cache.Reflector, error) {})
	inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { w.mark(obj) },
		UpdateFunc: func(old, obj any) {
			o, n := old.(*item), obj.(*item)
			if !reflect.DeepEqual(o.res, n.res) {
				w.mark(obj)
			}
		},
		DeleteFunc: func(obj any) { w.mark(obj) },
	})
	ictx, stop := context.WithCancel(ctx)
	r := &running{informer: inf, stop: stop, done: make(chan struct{})}
	w.mu.Lock()
	w.scopes[sc] = r
	w.epoch++ // the kinds watched changed
	w.mu.Unlock()
	go func() {
		defer close(r.done)
		inf.RunWithContext(ictx)
	}()
}

// noteErr records the last list or watch error of sc, or clears it.
func (w *Watcher) noteErr(sc scope, err error) {
	st := stateOf{}
	if err != nil {
		st.err = err.Error()
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

func (w *Watcher) mark(obj any) {
	var ref protocol.ResourceRef
	switch o := obj.(type) {
	case *item:
		ref = o.res.ResourceRef
	case cache.DeletedFinalStateUnknown:
		it, ok := o.Obj.(*item)
		if !ok {
			return
		}
		ref = it.res.ResourceRef
	default:
		return
	}
	w.mu.Lock()
	w.markLocked(ref)
	w.mu.Unlock()
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

// item is what the informers' stores hold: enough metadata for their keys,
// and the summary.
type item struct {
	metav1.ObjectMeta
	res protocol.Resource
}

func (i *item) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

func (i *item) DeepCopyObject() runtime.Object {
	c := *i
	i.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	return &c
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
	sort.Slice(out, func(i, j int) bool {
		if out[i].Kind != out[j].Kind {
			return out[i].Kind < out[j].Kind
		}
		return out[i].Namespace < out[j].Namespace
	})
	return out
}
