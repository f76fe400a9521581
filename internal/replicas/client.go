package replicas

import (
	"context"
	"fmt"
	"path/filepath"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// Client reaches the Leases of the cluster the hub runs in: a REST client of
// coordination.k8s.io/v1 alone. client-go's clientset, or a typed client of one
// group, brings every API group's types into the binary, and the agents run the
// same binary: registering them took 9 MB of each agent's memory as it started.
type Client struct {
	rest rest.Interface
}

// NewClient is a Client of the API server cfg reaches.
func NewClient(cfg *rest.Config) (*Client, error) {
	s := runtime.NewScheme()
	if err := coordinationv1.AddToScheme(s); err != nil {
		return nil, err
	}
	c := rest.CopyConfig(cfg)
	c.APIPath = "/apis"
	c.GroupVersion = &coordinationv1.SchemeGroupVersion
	c.NegotiatedSerializer = serializer.NewCodecFactory(s).WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return &Client{rest: rc}, nil
}

// ClientFromEnv is the client of the cluster the hub runs in: from the kubeconfig at
// kubeconfigPath (KUBECONFIG's value) when it is set, else the pod's service account.
func ClientFromEnv(kubeconfigPath string) (*Client, error) {
	var cfg *rest.Config
	var err error
	if kubeconfigPath != "" {
		rules := &clientcmd.ClientConfigLoadingRules{Precedence: filepath.SplitList(kubeconfigPath)}
		cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("KUBECONFIG %s: %w", kubeconfigPath, err)
		}
	} else if cfg, err = rest.InClusterConfig(); err != nil {
		return nil, fmt.Errorf("not in a pod and KUBECONFIG is not set: hub replicas coordinate through the Kubernetes API of the cluster they run in: %w", err)
	}
	cfg.UserAgent = "tether-hub"
	return NewClient(cfg)
}

// leaseClient is what a replica does with its own Lease.
type leaseClient interface {
	Create(ctx context.Context, l *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error)
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error)
	Update(ctx context.Context, l *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// leases are the Leases in one namespace, as client-go's typed client reaches them.
type leases struct {
	rest rest.Interface
	ns   string
}

func (c *Client) leases(ns string) leases { return leases{rest: c.rest, ns: ns} }

func (l leases) Create(ctx context.Context, lease *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	err := l.rest.Post().Namespace(l.ns).Resource("leases").VersionedParams(&opts, metav1.ParameterCodec).Body(lease).Do(ctx).Into(out)
	return out, err
}

func (l leases) Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	err := l.rest.Get().Namespace(l.ns).Resource("leases").Name(name).VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(out)
	return out, err
}

func (l leases) Update(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	err := l.rest.Put().Namespace(l.ns).Resource("leases").Name(lease.Name).VersionedParams(&opts, metav1.ParameterCodec).Body(lease).Do(ctx).Into(out)
	return out, err
}

func (l leases) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return l.rest.Delete().Namespace(l.ns).Resource("leases").Name(name).Body(&opts).Do(ctx).Error()
}

// listWatch lists and watches the Leases in ns that selector picks, for an informer.
func (c *Client) listWatch(ns, selector string) *cache.ListWatch {
	return cache.NewFilteredListWatchFromClient(c.rest, "leases", ns, func(o *metav1.ListOptions) {
		o.LabelSelector = selector
	})
}
