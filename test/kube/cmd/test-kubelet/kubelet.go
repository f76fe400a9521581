//go:build unix

package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"runtime"
	"strconv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/version"
	"k8s.io/utils/ptr"
)

// kubelet keeps the Node alive and one podWorker per Pod bound to it.
type kubelet struct {
	client kubernetes.Interface
	opts   options
	api    *url.URL // the API server, for KUBERNETES_SERVICE_HOST/PORT
	log    *slog.Logger

	// life ends when the kubelet stops; exec'd processes die with it.
	life     context.Context
	stopLife context.CancelFunc

	workers sync.WaitGroup // one per podWorker.run

	mu   sync.Mutex // guards the following
	pods map[types.UID]*podWorker
}

func newKubelet(client kubernetes.Interface, o options, api *url.URL, log *slog.Logger) *kubelet {
	life, stop := context.WithCancel(context.Background())
	return &kubelet{
		client: client, opts: o, api: api, log: log,
		life: life, stopLife: stop,
		pods: make(map[types.UID]*podWorker),
	}
}

// run registers the Node, keeps its Lease renewed and runs the Pods bound
// to it until ctx ends or a server fails (an error on serveErr); then it
// stops every container and returns once they are gone.
func (k *kubelet) run(ctx context.Context, port string, serveErr <-chan error) error {
	defer k.stopLife()
	if err := k.registerNode(ctx, port); err != nil {
		return fmt.Errorf("register node %q: %w", k.opts.nodeName, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var wg sync.WaitGroup
	wg.Go(func() { k.renewLease(ctx) })

	factory := informers.NewSharedInformerFactoryWithOptions(k.client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = "spec.nodeName=" + k.opts.nodeName
		}))
	inf := factory.Core().V1().Pods().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { k.podChanged(ctx, obj, false) },
		UpdateFunc: func(_, obj any) { k.podChanged(ctx, obj, false) },
		DeleteFunc: func(obj any) { k.podChanged(ctx, obj, true) },
	})
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	k.log.Info("The test kubelet is running", "node", k.opts.nodeName, "address", k.opts.address)

	select {
	case <-ctx.Done():
	case err = <-serveErr:
		err = fmt.Errorf("serve: %w", err)
	}
	cancel()
	factory.Shutdown()
	wg.Wait()
	// Every worker sees ctx end and stops its containers.
	k.workers.Wait()
	return err
}

// podChanged hands a Pod the informer saw to its worker, starting one for
// a Pod it hasn't seen.
func (k *kubelet) podChanged(ctx context.Context, obj any, deleted bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	pod, ok := obj.(*v1.Pod)
	if !ok {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	w := k.pods[pod.UID]
	if w == nil {
		if deleted || ctx.Err() != nil {
			return
		}
		w = newPodWorker(k, pod)
		k.pods[pod.UID] = w
		k.workers.Go(func() {
			w.run(ctx)
			k.mu.Lock()
			delete(k.pods, pod.UID)
			k.mu.Unlock()
		})
	}
	w.update(pod, deleted)
}

// podByName returns the worker of the Pod namespace/name, if any (and, if
// uid isn't empty, only with that UID).
func (k *kubelet) podByName(namespace, name string, uid types.UID) *podWorker {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, w := range k.pods {
		if w.namespace == namespace && w.name == name && (uid == "" || w.uid == uid) {
			return w
		}
	}
	return nil
}

func (k *kubelet) podByUID(uid types.UID) *podWorker {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.pods[uid]
}

// nodeDeclaredFeature is what the API server looks for in a Node's
// status.declaredFeatures before it passes WebSocket exec, attach and
// port-forward upgrades through to the kubelet.
const nodeDeclaredFeature = "ExtendWebSocketsToKubelet"

// registerNode creates the Node, Ready, or takes over one of the same
// name (the kubelet restarted) by replacing its status.
func (k *kubelet) registerNode(ctx context.Context, port string) error {
	p, err := strconv.ParseInt(port, 10, 32)
	if err != nil {
		return fmt.Errorf("port %q: %w", port, err)
	}
	now := metav1.Now()
	capacity := v1.ResourceList{
		// Nominal: nothing schedules against them.
		v1.ResourceCPU:    *resource.NewQuantity(int64(runtime.NumCPU()), resource.DecimalSI),
		v1.ResourceMemory: resource.MustParse("8Gi"),
		v1.ResourcePods:   resource.MustParse("110"),
	}
	status := v1.NodeStatus{
		Capacity:    capacity,
		Allocatable: capacity,
		Phase:       v1.NodeRunning,
		Conditions: []v1.NodeCondition{
			{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady", Message: "test kubelet is posting ready status", LastHeartbeatTime: now, LastTransitionTime: now},
			{Type: v1.NodeMemoryPressure, Status: v1.ConditionFalse, Reason: "KubeletHasSufficientMemory", LastHeartbeatTime: now, LastTransitionTime: now},
			{Type: v1.NodeDiskPressure, Status: v1.ConditionFalse, Reason: "KubeletHasNoDiskPressure", LastHeartbeatTime: now, LastTransitionTime: now},
			{Type: v1.NodePIDPressure, Status: v1.ConditionFalse, Reason: "KubeletHasSufficientPID", LastHeartbeatTime: now, LastTransitionTime: now},
		},
		// Only InternalIP: a Hostname address would be the node's name,
		// which resolves nowhere, and the API server would try it first.
		Addresses:       []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "127.0.0.1"}},
		DaemonEndpoints: v1.NodeDaemonEndpoints{KubeletEndpoint: v1.DaemonEndpoint{Port: int32(p)}},
		NodeInfo: v1.NodeSystemInfo{
			KubeletVersion:          version.Get().GitVersion,
			OperatingSystem:         runtime.GOOS,
			Architecture:            runtime.GOARCH,
			ContainerRuntimeVersion: "local-process://" + version.Get().GitVersion,
		},
	}
	if k.opts.declareWebSockets {
		status.DeclaredFeatures = []string{nodeDeclaredFeature}
	}
	node := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: k.opts.nodeName,
			Labels: map[string]string{
				v1.LabelHostname:   k.opts.nodeName,
				v1.LabelOSStable:   runtime.GOOS,
				v1.LabelArchStable: runtime.GOARCH,
			},
		},
		Status: status,
	}
	nodes := k.client.CoreV1().Nodes()
	_, err = nodes.Create(ctx, node, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	old, err := nodes.Get(ctx, node.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	old.Status = status
	_, err = nodes.UpdateStatus(ctx, old, metav1.UpdateOptions{})
	return err
}

// renewLease keeps the Node's Lease in kube-node-lease fresh, as the
// kubelet's heartbeat, until ctx ends.
func (k *kubelet) renewLease(ctx context.Context) {
	every := k.opts.leaseDuration / 4
	t := time.NewTicker(every)
	defer t.Stop()
	failed := false
	for {
		err := k.renewLeaseOnce(ctx)
		switch {
		case err != nil && ctx.Err() == nil && !failed:
			k.log.Warn("Can't renew the node's lease; retrying", "node", k.opts.nodeName, "err", err)
			failed = true
		case err == nil:
			failed = false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (k *kubelet) renewLeaseOnce(ctx context.Context) error {
	leases := k.client.CoordinationV1().Leases(v1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	lease, err := leases.Get(ctx, k.opts.nodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		node, err := k.client.CoreV1().Nodes().Get(ctx, k.opts.nodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Name: k.opts.nodeName, Namespace: v1.NamespaceNodeLease,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}},
			},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(k.opts.nodeName),
				LeaseDurationSeconds: ptr.To(int32(k.opts.leaseDuration / time.Second)),
				RenewTime:            &now,
			},
		}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	lease.Spec.RenewTime = &now
	_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	return err
}
