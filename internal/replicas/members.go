package replicas

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/tools/cache"
)

// observed is what this replica knows of one Lease.
type observed struct {
	rv string
	// changed is when, by this replica's clock, the Lease was last seen to change; zero while
	// it hasn't since it was first seen as a leftover. The Lease is live for the lease
	// duration after it: client-go's leaderelection measures the same way, never comparing
	// another machine's renewTime with this clock.
	changed time.Time
	signed  string // the annotations last verified, joined
	member  Member
	bad     error // why the annotations don't make a member, nil if they do
}

// startWatch runs an informer on the replicas' Leases in the namespace and the loop that
// drops members when their Leases expire. It returns a channel closed once the first list is
// in and handled.
func (r *Replicas) startWatch(ctx context.Context) (<-chan struct{}, error) {
	ctx, r.stop = context.WithCancel(ctx)
	inf := cache.NewSharedIndexInformer(r.client.listWatch(r.ns, LabelRole+"="+RoleHubReplica), &coordinationv1.Lease{}, 0, cache.Indexers{})
	if err := inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		r.mu.Lock()
		r.lastList = err
		r.mu.Unlock()
		if _, ok := r.limiter.Allow("watch"); ok {
			r.log.Warn("can't list or watch the replicas' Leases; members are as last seen", "namespace", r.ns, "err", err)
		}
	}); err != nil {
		return nil, fmt.Errorf("watch Leases: %w", err)
	}
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.observe(obj) },
		UpdateFunc: func(_, obj any) { r.observe(obj) },
		DeleteFunc: func(obj any) { r.forget(obj) },
	})
	if err != nil {
		return nil, fmt.Errorf("watch Leases: %w", err)
	}
	r.wg.Add(2)
	go func() {
		defer r.wg.Done()
		inf.RunWithContext(ctx)
	}()
	go func() {
		defer r.wg.Done()
		r.expiryLoop(ctx)
	}()
	return reg.HasSyncedChecker().Done(), nil
}

// expiryLoop recomputes the members when the timer set by recomputeLocked fires.
func (r *Replicas) expiryLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		}
		r.mu.Lock()
		r.recomputeLocked()
		r.mu.Unlock()
	}
}

func (r *Replicas) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *Replicas) observe(obj any) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock.Now()
	o := r.seen[l.Name]
	switch {
	case o == nil:
		o = &observed{}
		r.seen[l.Name] = o
		if !leftover(l, now, r.duration) {
			o.changed = now
		}
	case o.rv != l.ResourceVersion:
		o.changed = now
	}
	o.rv = l.ResourceVersion
	if l.Name == r.leaseName {
		if h := holderOf(l); h != "" && h != r.holder && r.err == nil {
			// Faster than the next renewal's conflict, and the same verdict.
			err := fmt.Errorf("Lease %s/%s is now held by %q: %w", r.ns, r.leaseName, h, ErrNameLost)
			r.log.Error("this hub replica lost its name to another", "lease", r.leaseName, "err", err)
			r.err = err
			close(r.done)
			r.renewCancel()
		}
		return
	}
	signed := l.Annotations[AnnotationAddr] + "\x00" + l.Annotations[AnnotationCert] + "\x00" + l.Annotations[AnnotationSig]
	if o.signed != signed {
		o.signed = signed
		o.member, o.bad = verify(l.Name, l.Annotations, r.keys)
		if o.bad != nil {
			// Once per Lease and content, and few a minute in all: anyone who may write
			// Leases here can write these.
			if held, ok := r.limiter.Allow("lease/" + l.Name); ok {
				r.log.Warn("a Lease labelled as a hub replica's is not one: it isn't signed with TETHER_TOKEN_SIGNING_KEY_FILE's key, or is malformed; it is ignored",
					"namespace", r.ns, "lease", l.Name, "heldBack", held, "err", o.bad)
			}
		}
	}
	r.recomputeLocked()
}

func (r *Replicas) forget(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	l, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.seen, l.Name)
	r.recomputeLocked()
}

// recomputeLocked sets the members from what was seen, says so on Changed if they changed,
// and sets the timer for the next expiry.
func (r *Replicas) recomputeLocked() {
	now := r.clock.Now()
	// While this replica doesn't see its own renewals come back, its view is stale (the API
	// server unreachable, the watch broken) and a dead peer looks like a silent watch: it keeps
	// the members it has rather than drop them all after a lease (issue 35: the API unreachable
	// for a minute). Time stops for them a renewal and a half after its own was last seen; a
	// live peer renewed within a renewal of that, so it stays while the lease is over 2.5
	// renewals (15 s, 5 s).
	at := now
	if own := r.seen[r.leaseName]; own != nil && !own.changed.IsZero() {
		if fresh := own.changed.Add(r.renew + r.renew/2); fresh.Before(at) {
			at = fresh
		}
	}
	var members []Member
	var next time.Time
	for name, o := range r.seen {
		if name == r.leaseName || o.bad != nil || o.changed.IsZero() {
			continue
		}
		expires := o.changed.Add(r.duration)
		if !at.Before(expires) {
			continue
		}
		members = append(members, o.member)
		if next.IsZero() || expires.Before(next) {
			next = expires
		}
	}
	slices.SortFunc(members, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	if !slices.EqualFunc(members, r.members, Member.equal) {
		r.members = members
		select {
		case r.changed <- struct{}{}:
		default:
		}
	}
	switch {
	case next.IsZero() || at.Before(now):
		// Nothing to expire, or time stopped until this replica's own Lease changes again,
		// which recomputes.
		if r.timer != nil {
			r.timer.Stop()
		}
	case r.timer == nil:
		r.timer = r.clock.AfterFunc(next.Sub(now), r.poke)
	default:
		r.timer.Reset(next.Sub(now))
	}
}
