package watch

import (
	"context"
	"errors"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/tetherhq/tether/internal/protocol"
)

// StreamOptions shape what Stream sends.
type StreamOptions struct {
	// GatewayTieBreaker is TETHER_ISTIO_GATEWAY_TIE_BREAKER.
	GatewayTieBreaker string
	// Batch is how long changes gather before they go out together. Zero
	// means 250 ms.
	Batch time.Duration
	// SyncWait bounds the wait for the reflectors' first lists before the
	// snapshot goes out (a list that fails ends the wait for its kind);
	// what arrives later follows as changes. Zero means 30 s.
	SyncWait time.Duration
}

// snapshotChunk is how many objects go in one Update of a snapshot.
const snapshotChunk = 500

// Stream sends the inventory to out: a full snapshot, then batched changes,
// until ctx ends or a write fails. One Stream runs at a time, as the agent
// has one hub connection; a second returns ErrBusy. It writes at most
// maxWrite bytes to out at once.
func (w *Watcher) Stream(ctx context.Context, out io.Writer, opts StreamOptions) error {
	out = smallWrites{out}
	if opts.Batch == 0 {
		opts.Batch = 250 * time.Millisecond
	}
	if opts.SyncWait == 0 {
		opts.SyncWait = 30 * time.Second
	}
	w.mu.Lock()
	if w.sub {
		w.mu.Unlock()
		return ErrBusy
	}
	w.sub = true
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.sub = false
		clear(w.dirty)
		w.mu.Unlock()
	}()

	began := time.Now()
	w.waitSynced(ctx, opts.SyncWait)
	listed := time.Since(began)
	// Changes from here on are marked dirty, so nothing falls between the
	// snapshot and the first batch; an object in both is sent twice, which
	// is harmless.
	w.mu.Lock()
	clear(w.dirty)
	epoch := w.epoch
	kinds := w.kindStatesLocked()
	running := w.runningLocked()
	w.mu.Unlock()

	// A chunk at a time, never the whole inventory copied at once: with
	// 30,000 objects that copy alone was a third of the agent's live heap.
	u := &protocol.Update{Snapshot: true, Kinds: kinds, GatewayTieBreaker: opts.GatewayTieBreaker}
	chunk := make([]protocol.Resource, 0, snapshotChunk)
	sent := 0
	for _, r := range running {
		for _, key := range r.refl.keys() {
			res, ok := r.refl.lookup(key)
			if !ok || !w.shows(res.ResourceRef) {
				continue // gone meanwhile: its change follows
			}
			if chunk = append(chunk, res); len(chunk) < snapshotChunk {
				continue
			}
			if err := sendChunks(out, u, chunk, nil, false); err != nil {
				return err
			}
			sent += len(chunk)
			chunk, u = chunk[:0], &protocol.Update{}
		}
	}
	if err := sendChunks(out, u, chunk, nil, true); err != nil {
		return err
	}
	sent += len(chunk)
	chunk = nil
	w.log.Info("Sent the hub the inventory", "objects", sent, "waitedForLists", listed.Round(time.Millisecond), "took", time.Since(began).Round(time.Millisecond))

	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w.wake:
		}
		// Let a burst of changes gather into one message.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(opts.Batch):
		}
		w.mu.Lock()
		refs := make([]protocol.ResourceRef, 0, len(w.dirty))
		for ref := range w.dirty {
			refs = append(refs, ref)
		}
		clear(w.dirty)
		u := &protocol.Update{}
		if w.epoch != epoch {
			epoch = w.epoch
			u.Kinds = w.kindStatesLocked()
		}
		w.mu.Unlock()

		var ups []protocol.Resource
		var dels []protocol.ResourceRef
		for _, ref := range refs {
			if !w.shows(ref) {
				continue
			}
			if r, ok := w.lookup(ref); ok {
				ups = append(ups, r)
			} else {
				dels = append(dels, ref)
			}
		}
		if len(ups) == 0 && len(dels) == 0 && u.Kinds == nil {
			continue
		}
		if err := sendChunks(out, u, ups, dels, false); err != nil {
			return err
		}
	}
}

// ErrBusy is returned by a second Stream while one runs.
var ErrBusy = errors.New("inventory: a stream is already running")

// shows reports whether ref may leave the cluster: with
// TETHER_ALLOWED_NAMESPACES, only those namespaces exist for the hub.
func (w *Watcher) shows(ref protocol.ResourceRef) bool {
	if len(w.cfg.Namespaces) == 0 {
		return true
	}
	if ref.Kind == "namespaces" {
		return slices.Contains(w.cfg.Namespaces, ref.Name)
	}
	return ref.Namespace == "" || slices.Contains(w.cfg.Namespaces, ref.Namespace)
}

// lookup returns the current summary of ref, if it exists.
func (w *Watcher) lookup(ref protocol.ResourceRef) (protocol.Resource, bool) {
	k, ok := w.kind(ref.Kind)
	if !ok {
		return protocol.Resource{}, false
	}
	sc := scope{kind: ref.Kind}
	if k.Namespaced && len(w.cfg.Namespaces) > 0 {
		sc.namespace = ref.Namespace
	}
	w.mu.Lock()
	r := w.scopes[sc]
	w.mu.Unlock()
	if r == nil {
		return protocol.Resource{}, false
	}
	key := ref.Name
	if ref.Namespace != "" {
		key = ref.Namespace + "/" + ref.Name
	}
	return r.refl.lookup(key)
}

func (w *Watcher) runningLocked() []*running {
	out := make([]*running, 0, len(w.scopes))
	for _, r := range w.scopes {
		out = append(out, r)
	}
	return out
}

// waitSynced waits until the watcher has looked at the cluster and every
// reflector it started has tried its first list, or max has passed. A kind
// whose list fails goes out with its error rather than hold the snapshot
// (a CRD whose conversion webhook is down fails every list); its objects
// follow as changes once a list works.
func (w *Watcher) waitSynced(ctx context.Context, max time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, max)
	defer cancel()
	select {
	case <-w.reconciled:
	case <-ctx.Done():
		return
	}
	w.mu.Lock()
	running := w.runningLocked()
	w.mu.Unlock()
	for _, r := range running {
		select {
		case <-r.refl.tried:
		case <-ctx.Done():
			return
		}
	}
}

// sendChunks sends head with ups and dels spread over as many Updates as
// the size limits need. For a snapshot, the last one says Complete.
func sendChunks(out io.Writer, head *protocol.Update, ups []protocol.Resource, dels []protocol.ResourceRef, snapshot bool) error {
	u := head
	for {
		n := min(len(ups), snapshotChunk)
		u.Upserts, ups = ups[:n:n], ups[n:]
		m := min(len(dels), snapshotChunk-n)
		u.Deletes, dels = dels[:m:m], dels[m:]
		last := len(ups) == 0 && len(dels) == 0
		u.Complete = snapshot && last
		if err := writeSplitting(out, u); err != nil {
			return err
		}
		if last {
			return nil
		}
		u = &protocol.Update{}
	}
}

// writeSplitting writes u, halving its objects over two Updates (the first
// keeping u's head) while it is over the message size limit. One object too
// large for a message alone goes out cut down (shrink): left out, or failing
// the stream, it would keep the whole inventory from ever arriving.
func writeSplitting(out io.Writer, u *protocol.Update) error {
	err := protocol.WriteUpdate(out, u)
	if !errors.Is(err, protocol.ErrTooLarge) {
		return err
	}
	if len(u.Kinds) > 0 && kindsTooLarge(u) {
		v := *u
		if v.Kinds = shrinkKinds(u.Kinds); v.Kinds == nil {
			return err
		}
		return writeSplitting(out, &v)
	}
	if len(u.Upserts) == 1 && len(u.Deletes) == 0 {
		r := u.Upserts[0]
		if !shrink(&r) {
			return err
		}
		v := *u
		v.Upserts = []protocol.Resource{r}
		return writeSplitting(out, &v)
	}
	if len(u.Upserts)+len(u.Deletes) < 2 {
		return err
	}
	a, b := *u, protocol.Update{Complete: u.Complete}
	a.Complete = false
	hu, hd := len(u.Upserts)/2, len(u.Deletes)/2
	if hu+hd == 0 { // one of each: each alone
		hu = len(u.Upserts)
	}
	a.Upserts, b.Upserts = u.Upserts[:hu], u.Upserts[hu:]
	a.Deletes, b.Deletes = u.Deletes[:hd], u.Deletes[hd:]
	if err := writeSplitting(out, &a); err != nil {
		return err
	}
	return writeSplitting(out, &b)
}

// kindsTooLarge says whether u's kinds alone, without its objects, are
// over a message: which no splitting of the objects helps.
func kindsTooLarge(u *protocol.Update) bool {
	head := protocol.Update{Snapshot: u.Snapshot, Kinds: u.Kinds, GatewayTieBreaker: u.GatewayTieBreaker}
	return errors.Is(protocol.WriteUpdate(io.Discard, &head), protocol.ErrTooLarge)
}

// minKindError is as short as shrinkKinds cuts a kind's error.
const minKindError = 64

// shrinkKinds returns a copy of kinds with every error cut to half the
// longest's length, or nil when they are all as short as minKindError
// already. An error for each kind in each of hundreds of allowed namespaces,
// each at its bound, can together be over a message; cut further, they
// still say which kinds fail where, and the inventory arrives.
func shrinkKinds(kinds []protocol.KindState) []protocol.KindState {
	longest := 0
	for _, k := range kinds {
		longest = max(longest, len(k.Error))
	}
	if longest <= minKindError {
		return nil
	}
	out := slices.Clone(kinds)
	for i := range out {
		out[i].Error = protocol.Clip(out[i].Error, max(longest/2, minKindError))
	}
	return out
}

// shrink halves r's longest list (hosts, gateways, quota, images,
// conditions or labels),
// keeping the first, and reports whether it had one to cut. With no list
// left, it cuts r's free texts (phase, sync, health, version, owner) to
// maxKindError: only a broken or hostile writer of an object's status
// makes one that long, and it must not keep the rest from the hub. r's
// lists are shared with the watcher's copy: they are sliced or copied,
// never changed.
func shrink(r *protocol.Resource) bool {
	switch longest := max(len(r.Hosts), len(r.Images), len(r.Conditions), len(r.Labels), len(r.Gateways), len(r.Quota)); {
	case longest == 0:
		cut := false
		for _, s := range []*string{&r.Phase, &r.Sync, &r.Health, &r.Version, &r.Owner, &r.Replicas, &r.Message, &r.Object, &r.Reason, &r.LastSeen} {
			if len(*s) > maxKindError {
				*s, cut = protocol.Clip(*s, maxKindError), true
			}
		}
		return cut
	case len(r.Hosts) == longest:
		r.Hosts = r.Hosts[:longest/2]
	case len(r.Gateways) == longest:
		r.Gateways = r.Gateways[:longest/2]
	case len(r.Quota) == longest:
		r.Quota = r.Quota[:longest/2]
	case len(r.Images) == longest:
		r.Images = r.Images[:longest/2]
	case len(r.Conditions) == longest:
		r.Conditions = r.Conditions[:longest/2]
	default:
		keys := slices.Sorted(maps.Keys(r.Labels))
		kept := make(map[string]string, longest/2)
		for _, k := range keys[:longest/2] {
			kept[k] = r.Labels[k]
		}
		r.Labels = kept
	}
	return true
}

// maxWrite is the most Stream writes to out at once. out is the agent's
// stream to the hub, and each write goes out in TLS records no larger than
// it. The hub's end of the connection keeps a read buffer as large as the
// largest record that came on it, for the connection's life: a snapshot in
// one write left 32 KiB and more there for every agent
// (docs/decisions/020-the-hubs-tls-read-buffers.md).
const maxWrite = 4 << 10

// smallWrites writes to w in pieces of at most maxWrite bytes.
type smallWrites struct{ w io.Writer }

func (s smallWrites) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		n, err := s.w.Write(p[:min(len(p), maxWrite)])
		written += n
		if err != nil {
			return written, err
		}
		p = p[n:]
	}
	return written, nil
}
