//go:build unix

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// Restart back-off: doubling from backoffMin to backoffMax, and back to
// backoffMin after a run that lasted backoffReset. Kubernetes' own starts
// at 10 s; tests want crash loops they can watch in seconds.
const (
	backoffMin   = time.Second
	backoffMax   = 10 * time.Second
	backoffReset = 10 * time.Second
)

// podWorker runs one Pod's containers and reports them in the Pod's
// status. run owns the containers: it starts them and returns after they
// are gone, when the Pod is deleted or the kubelet stops.
type podWorker struct {
	k                    *kubelet
	uid                  types.UID
	namespace, name, dir string        // dir: the Pod's logs and working directory
	notify               chan struct{} // cap 1: update stored a newer Pod
	exits                chan int      // index of a container whose run ended; one slot each

	mu         sync.Mutex // guards the following
	pod        *v1.Pod    // the latest the informer saw
	deleted    bool       // gone from the API server
	containers []*container
	startTime  *metav1.Time
	conditions map[v1.PodConditionType]v1.PodCondition // as last reported, for transition times
}

// container is one container of the Pod across its restarts.
type container struct {
	spec     v1.Container
	restarts int
	cur      *instance // the current or latest run; nil before the first
	prev     *instance // the run before cur, for `logs --previous`
	waiting  *v1.ContainerStateWaiting
	retryAt  time.Time // when to start again; zero: not scheduled
	backoff  time.Duration
	finished bool // ended for good, by the restart policy
}

func newPodWorker(k *kubelet, pod *v1.Pod) *podWorker {
	w := &podWorker{
		k: k, uid: pod.UID, namespace: pod.Namespace, name: pod.Name,
		dir:        filepath.Join(k.opts.rootDir, "pods", fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID)),
		notify:     make(chan struct{}, 1),
		exits:      make(chan int, len(pod.Spec.Containers)),
		pod:        pod,
		conditions: make(map[v1.PodConditionType]v1.PodCondition),
	}
	for _, c := range pod.Spec.Containers {
		w.containers = append(w.containers, &container{spec: c})
	}
	return w
}

// update stores the latest Pod and wakes run.
func (w *podWorker) update(pod *v1.Pod, deleted bool) {
	w.mu.Lock()
	w.pod, w.deleted = pod, w.deleted || deleted
	w.mu.Unlock()
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

func (w *podWorker) run(ctx context.Context) {
	log := w.k.log.With("pod", w.namespace+"/"+w.name)
	w.mu.Lock()
	phase, deleting := w.pod.Status.Phase, w.pod.DeletionTimestamp != nil
	w.mu.Unlock()
	if phase == v1.PodSucceeded || phase == v1.PodFailed || deleting {
		// Done or being deleted before this kubelet saw it: only its
		// deletion is left.
		for _, c := range w.containers {
			c.finished = true
		}
	} else {
		log.Info("Starting the pod's containers")
		w.startDue(ctx)
		w.sendStatus(ctx)
	}
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	for {
		// A nil channel when no restart is due: the select never picks it.
		var retryC <-chan time.Time
		if at := w.nextRetry(); !at.IsZero() {
			retry.Reset(time.Until(at))
			retryC = retry.C
		}
		select {
		case <-ctx.Done():
			// The kubelet is stopping: not ctx, which would cut the grace.
			w.stopAll(context.Background(), w.k.opts.shutdownGrace)
			return
		case <-w.notify:
			w.mu.Lock()
			pod, deleted := w.pod, w.deleted
			w.mu.Unlock()
			if deleted {
				log.Info("The pod is gone; stopping its containers")
				w.stopAll(ctx, 0)
				return
			}
			if pod.DeletionTimestamp != nil {
				w.terminate(ctx, pod)
				return
			}
		case i := <-w.exits:
			w.exited(i)
			w.sendStatus(ctx)
		case <-retryC:
			w.startDue(ctx)
			w.sendStatus(ctx)
		}
	}
}

// terminate stops the containers within the deletion's grace period and
// then deletes the Pod for good, which is the kubelet's part of a delete.
func (w *podWorker) terminate(ctx context.Context, pod *v1.Pod) {
	grace := int64(v1.DefaultTerminationGracePeriodSeconds)
	switch {
	case pod.DeletionGracePeriodSeconds != nil:
		grace = *pod.DeletionGracePeriodSeconds
	case pod.Spec.TerminationGracePeriodSeconds != nil:
		grace = *pod.Spec.TerminationGracePeriodSeconds
	}
	w.k.log.Info("The pod is being deleted; stopping its containers", "pod", w.namespace+"/"+w.name, "grace", grace)
	w.stopAll(ctx, time.Duration(grace)*time.Second)
	w.sendStatus(ctx)
	err := w.k.client.CoreV1().Pods(w.namespace).Delete(ctx, w.name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      &metav1.Preconditions{UID: &w.uid},
	})
	if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
		w.k.log.Warn("Can't finish deleting the pod", "pod", w.namespace+"/"+w.name, "err", err)
	}
}

// startDue starts every container that should run and isn't.
func (w *podWorker) startDue(ctx context.Context) {
	w.mu.Lock()
	pod := w.pod
	w.mu.Unlock()
	now := time.Now()
	for i, c := range w.containers {
		if c.finished || (c.cur != nil && !c.cur.exited()) || (!c.retryAt.IsZero() && now.Before(c.retryAt)) {
			continue
		}
		restart := c.restarts
		if c.cur != nil {
			restart++
		}
		spec, err := w.k.resolve(ctx, pod, c.spec)
		if err != nil {
			w.mu.Lock()
			c.waiting = &v1.ContainerStateWaiting{Reason: "CreateContainerConfigError", Message: err.Error()}
			c.retryAt = now.Add(c.nextBackoff(0))
			w.mu.Unlock()
			continue
		}
		if spec.dir == "" {
			// Not the kubelet's own (a source tree, under go test).
			spec.dir = w.dir
		}
		logPath := filepath.Join(w.dir, c.spec.Name, fmt.Sprintf("%d.log", restart))
		inst, err := startInstance(w.k.log.With("pod", w.namespace+"/"+w.name), spec, logPath, func() { w.exits <- i })
		if err != nil {
			// As a runtime reports it: terminated, so the restart policy applies.
			w.k.log.Warn("Can't start a container", "pod", w.namespace+"/"+w.name, "container", c.spec.Name, "err", err)
		}
		w.mu.Lock()
		if c.cur != nil {
			c.prev, c.restarts = c.cur, restart
		}
		if w.startTime == nil {
			w.startTime = ptr.To(metav1.NewTime(now))
		}
		c.cur, c.waiting, c.retryAt = inst, nil, time.Time{}
		w.mu.Unlock()
	}
}

// exited applies the restart policy to container i, whose run ended.
func (w *podWorker) exited(i int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := w.containers[i]
	r := c.cur.result()
	restart := false
	switch w.pod.Spec.RestartPolicy {
	case v1.RestartPolicyAlways, "":
		restart = true
	case v1.RestartPolicyOnFailure:
		restart = r.ExitCode != 0
	}
	if !restart {
		c.finished = true
		return
	}
	d := c.nextBackoff(r.FinishedAt.Sub(r.StartedAt.Time))
	c.retryAt = time.Now().Add(d)
	c.waiting = &v1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
		Message: fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)", d, c.spec.Name, w.name, w.namespace, w.uid)}
}

// nextBackoff returns how long to wait before the next start, given how
// long the last run lasted.
func (c *container) nextBackoff(ran time.Duration) time.Duration {
	if ran >= backoffReset || c.backoff == 0 {
		c.backoff = backoffMin
	} else {
		c.backoff = min(2*c.backoff, backoffMax)
	}
	return c.backoff
}

func (w *podWorker) nextRetry() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	var next time.Time
	for _, c := range w.containers {
		if !c.finished && !c.retryAt.IsZero() && (next.IsZero() || c.retryAt.Before(next)) {
			next = c.retryAt
		}
	}
	return next
}

// stopAll stops every running container at once (SIGTERM, SIGKILL after
// grace or when ctx ends) and returns when they are gone.
func (w *podWorker) stopAll(ctx context.Context, grace time.Duration) {
	var wg sync.WaitGroup
	w.mu.Lock()
	for _, c := range w.containers {
		c.finished = true
		if inst := c.cur; inst != nil {
			wg.Go(func() { inst.stop(ctx, grace) })
		}
	}
	w.mu.Unlock()
	wg.Wait()
}

// container returns the container called name, with its current run.
func (w *podWorker) container(name string) (*container, *instance, *instance, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.containers {
		if c.spec.Name == name {
			return c, c.cur, c.prev, true
		}
	}
	return nil, nil, nil, false
}

// sendStatus reports the containers' state as the Pod's status.
func (w *podWorker) sendStatus(ctx context.Context) {
	w.mu.Lock()
	if w.deleted {
		w.mu.Unlock()
		return
	}
	status := w.statusLocked()
	w.mu.Unlock()
	// A merge patch replaces lists whole, which suits a status this
	// kubelet owns; the UID makes it fail for a newer Pod of the same name.
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": w.uid},
		"status":   status,
	})
	if err != nil {
		panic(err) // a PodStatus always marshals
	}
	_, err = w.k.client.CoreV1().Pods(w.namespace).Patch(ctx, w.name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil && ctx.Err() == nil && !apierrors.IsNotFound(err) {
		w.k.log.Warn("Can't update the pod's status", "pod", w.namespace+"/"+w.name, "err", err)
	}
}

func (w *podWorker) statusLocked() v1.PodStatus {
	ips := []v1.PodIP{{IP: "127.0.0.1"}}
	st := v1.PodStatus{
		HostIP: "127.0.0.1", HostIPs: []v1.HostIP{{IP: "127.0.0.1"}},
		PodIP: "127.0.0.1", PodIPs: ips,
		StartTime: w.startTime,
	}
	allRunning, allFinished, allSucceeded, started := true, true, true, false
	for _, c := range w.containers {
		cs := v1.ContainerStatus{Name: c.spec.Name, Image: c.spec.Image, ImageID: c.spec.Image, RestartCount: int32(c.restarts), Started: ptr.To(false)}
		cur := c.cur
		if cur != nil {
			started = true
			cs.ContainerID = cur.id
		}
		switch {
		case cur != nil && !cur.exited():
			cs.State.Running = &v1.ContainerStateRunning{StartedAt: cur.started}
			cs.Ready, cs.Started = true, ptr.To(true)
			if c.prev != nil {
				cs.LastTerminationState.Terminated = c.prev.result()
			}
		case c.waiting != nil:
			cs.State.Waiting = c.waiting
			if cur != nil {
				cs.LastTerminationState.Terminated = cur.result()
			}
		case cur != nil:
			cs.State.Terminated = cur.result()
		default:
			cs.State.Waiting = &v1.ContainerStateWaiting{Reason: "ContainerCreating"}
		}
		allRunning = allRunning && cs.State.Running != nil
		allFinished = allFinished && c.finished
		allSucceeded = allSucceeded && cs.State.Terminated != nil && cs.State.Terminated.ExitCode == 0
		st.ContainerStatuses = append(st.ContainerStatuses, cs)
	}
	switch {
	case allFinished && allSucceeded:
		st.Phase = v1.PodSucceeded
	case allFinished:
		st.Phase = v1.PodFailed
	case started:
		st.Phase = v1.PodRunning
	default:
		st.Phase = v1.PodPending
	}
	ready, reason := v1.ConditionTrue, ""
	switch {
	case st.Phase == v1.PodSucceeded || st.Phase == v1.PodFailed:
		ready, reason = v1.ConditionFalse, "PodCompleted"
	case !allRunning:
		ready, reason = v1.ConditionFalse, "ContainersNotReady"
	}
	for _, c := range []struct {
		t      v1.PodConditionType
		status v1.ConditionStatus
		reason string
	}{
		{v1.PodReadyToStartContainers, v1.ConditionTrue, ""},
		{v1.PodInitialized, v1.ConditionTrue, ""},
		{v1.ContainersReady, ready, reason},
		{v1.PodReady, ready, reason},
		{v1.PodScheduled, v1.ConditionTrue, ""},
	} {
		cond := w.conditions[c.t]
		if cond.Type == "" || cond.Status != c.status {
			cond = v1.PodCondition{Type: c.t, Status: c.status, LastTransitionTime: metav1.Now()}
		}
		cond.Reason = c.reason
		w.conditions[c.t] = cond
		st.Conditions = append(st.Conditions, cond)
	}
	return st
}
