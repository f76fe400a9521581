package replicas

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// hold writes into l what this replica's Lease says: its holder, its signed identity, and a
// renewal now.
func (r *Replicas) hold(l *coordinationv1.Lease, now time.Time, acquire bool) {
	l.Name, l.Namespace = r.leaseName, r.ns
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	l.Labels[LabelRole] = RoleHubReplica
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	maps.Copy(l.Annotations, r.ann)
	secs := int32(r.duration / time.Second)
	if secs < 1 {
		secs = 1
	}
	t := metav1.NewMicroTime(now)
	l.Spec.HolderIdentity = &r.holder
	l.Spec.LeaseDurationSeconds = &secs
	l.Spec.RenewTime = &t
	if acquire {
		l.Spec.AcquireTime = &t
		n := int32(0)
		if l.Spec.LeaseTransitions != nil {
			n = *l.Spec.LeaseTransitions + 1
		}
		l.Spec.LeaseTransitions = &n
	}
}

func holderOf(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// acquire creates this replica's Lease, or takes it over from a holder that stopped renewing
// it: one whose Lease doesn't change for the lease duration, as this replica's clock measures
// it, or whose renewTime is long past (a leftover, decision 032). Another replica's clock is
// never compared with this one's but for that.
func (r *Replicas) acquire(ctx context.Context) (*coordinationv1.Lease, error) {
	deadline := r.clock.Now().Add(r.duration + r.renew)
	var seenRV string
	var seenAt time.Time
	for {
		l := &coordinationv1.Lease{}
		r.hold(l, r.clock.Now(), true)
		created, err := r.leases.Create(ctx, l, metav1.CreateOptions{})
		if err == nil {
			return created, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("join replicas: create Lease %s/%s: %w", r.ns, r.leaseName, err)
		}
		cur, err := r.leases.Get(ctx, r.leaseName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue // released between the two calls
		}
		if err != nil {
			return nil, fmt.Errorf("join replicas: get Lease %s/%s: %w", r.ns, r.leaseName, err)
		}
		now := r.clock.Now()
		free := false
		switch {
		case holderOf(cur) == "":
			free = true
		case seenRV == "":
			seenRV, seenAt = cur.ResourceVersion, now
			free = leftover(cur, now, r.duration)
		case cur.ResourceVersion != seenRV:
			seenRV, seenAt = cur.ResourceVersion, now
		default:
			free = now.Sub(seenAt) >= r.duration
		}
		if free {
			take := cur.DeepCopy()
			r.hold(take, now, true)
			took, err := r.leases.Update(ctx, take, metav1.UpdateOptions{})
			if err == nil {
				r.log.Info("took over the Lease of a replica that stopped renewing it", "lease", r.leaseName, "previous", holderOf(cur))
				return took, nil
			}
			if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("join replicas: take over Lease %s/%s: %w", r.ns, r.leaseName, err)
			}
			continue // it changed under us: look again
		}
		if !now.Before(deadline) {
			return nil, fmt.Errorf("%s %q is taken: Lease %s/%s is held by %q, which keeps renewing it; give each hub replica its own name: %w",
				settingName, r.self.member.Name, r.ns, r.leaseName, holderOf(cur), ErrNameTaken)
		}
		r.log.Info("waiting for another holder of this replica's name to stop renewing its Lease", "lease", r.leaseName, "holder", holderOf(cur))
		if err := r.sleep(ctx, r.renew/2); err != nil {
			return nil, fmt.Errorf("join replicas: wait for Lease %s/%s: %w", r.ns, r.leaseName, err)
		}
	}
}

// leftover reports whether l was last renewed so long ago, by this replica's clock, that its
// holder is gone: even a clock that far off is only a renewal late in being believed.
func leftover(l *coordinationv1.Lease, now time.Time, duration time.Duration) bool {
	return l.Spec.RenewTime == nil || now.Sub(l.Spec.RenewTime.Time) > 2*duration
}

// sleep waits d on the replica's clock, or until ctx ends.
func (r *Replicas) sleep(ctx context.Context, d time.Duration) error {
	ch := make(chan struct{})
	t := r.clock.AfterFunc(d, func() { close(ch) })
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// renewLoop renews the Lease every RenewInterval until ctx ends or the name is lost. One
// write a renewal at rest: the budget is one per replica every 2 s.
func (r *Replicas) renewLoop(ctx context.Context) {
	defer close(r.renewDone)
	tick := make(chan struct{}, 1)
	t := r.clock.AfterFunc(r.renew, func() {
		select {
		case tick <- struct{}{}:
		default:
		}
	})
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
		}
		if err := r.renewOnce(ctx); err != nil {
			if errors.Is(err, ErrNameLost) {
				r.log.Error("this hub replica lost its name to another", "lease", r.leaseName, "err", err)
				r.finish(err)
				return
			}
			if ctx.Err() != nil {
				return
			}
			if _, ok := r.limiter.Allow("renew"); ok {
				r.log.Warn("can't renew this replica's Lease; the others drop it if this lasts", "lease", r.leaseName, "err", err)
			}
		}
		t.Reset(r.renew)
	}
}

// renewOnce writes a renewal of the Lease: one Update, unless the Lease changed or vanished.
func (r *Replicas) renewOnce(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, r.duration)
	defer cancel()
	r.mu.Lock()
	l := r.own.DeepCopy()
	r.mu.Unlock()
	r.hold(l, r.clock.Now(), false)
	updated, err := r.leases.Update(ctx, l, metav1.UpdateOptions{})
	switch {
	case err == nil:
	case apierrors.IsConflict(err):
		// Someone wrote the Lease: another holder of the name, or a person's label.
		cur, err := r.leases.Get(ctx, r.leaseName, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("get Lease after a conflict: %w", err)
		}
		if h := holderOf(cur); h != r.holder {
			return fmt.Errorf("Lease %s/%s is now held by %q: %w", r.ns, r.leaseName, h, ErrNameLost)
		}
		r.hold(cur, r.clock.Now(), false)
		if updated, err = r.leases.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("renew Lease: %w", err)
		}
	case apierrors.IsNotFound(err):
		// Deleted by someone else: hold it again, unless another holder of the name has.
		l = &coordinationv1.Lease{}
		r.hold(l, r.clock.Now(), true)
		updated, err = r.leases.Create(ctx, l, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("Lease %s/%s was made again by another replica: %w", r.ns, r.leaseName, ErrNameLost)
		}
		if err != nil {
			return fmt.Errorf("make the deleted Lease again: %w", err)
		}
	default:
		return fmt.Errorf("renew Lease: %w", err)
	}
	r.mu.Lock()
	r.own = updated
	r.mu.Unlock()
	return nil
}

// release deletes the Lease if it is still this replica's, as last written.
func (r *Replicas) release() error {
	r.mu.Lock()
	own, lost := r.own, r.err != nil
	r.mu.Unlock()
	if own == nil || lost {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.duration)
	defer cancel()
	for range 2 {
		err := r.leases.Delete(ctx, own.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &own.UID, ResourceVersion: &own.ResourceVersion}})
		if err == nil || apierrors.IsNotFound(err) {
			return nil
		}
		if !apierrors.IsConflict(err) {
			return fmt.Errorf("delete Lease %s/%s: %w", r.ns, r.leaseName, err)
		}
		// Written since: still ours (a label added), or another holder's, which stays.
		cur, err := r.leases.Get(ctx, own.Name, metav1.GetOptions{})
		if err != nil || holderOf(cur) != r.holder || cur.UID != own.UID {
			return nil
		}
		own = cur
	}
	return nil
}
