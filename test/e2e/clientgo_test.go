package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// requestLog records the requests a client-go client sends, and lets the
// test close the connections of the transport underneath when it ends
// (client-go caches transports; their idle connections are goroutines).
type requestLog struct {
	mu    sync.Mutex
	lines []string // "<method> <query> <content type> <status>" or "<method> <query> error"
	rt    http.RoundTripper
}

func (l *requestLog) wrap(cfg *rest.Config) {
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		l.mu.Lock()
		l.rt = rt
		l.mu.Unlock()
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			line := req.Method + " " + req.URL.RawQuery + " "
			if err != nil {
				line += "error"
			} else {
				line += resp.Header.Get("Content-Type") + " " + resp.Status
			}
			l.mu.Lock()
			l.lines = append(l.lines, line)
			l.mu.Unlock()
			return resp, err
		})
	}
}

func (l *requestLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lines)
}

func (l *requestLog) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rt != nil {
		utilnet.CloseIdleConnectionsFor(l.rt)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestInformerAcrossRestarts: a client-go informer through the hub, filling
// its cache with a streaming list (WatchListClient, on by default in
// client-go 0.36), keeps the cache right across a restart of the hub on the
// same address and a restart of the agent: what was created and deleted
// while either was away appears in and leaves the cache.
func TestInformerAcrossRestarts(t *testing.T) {
	ns := unique("informer")
	admin(t, "create", "namespace", ns)
	setUpPeople(t, "team-a", "team-b") // the tether:admins binding
	addr := freeAddr(t)
	extra := map[string]string{"TETHER_RECONNECT_SPREAD_SECONDS": "1", "TETHER_SHUTDOWN_GRACE_SECONDS": "1"}
	h, hubURL := hubAt(t, addr, extra, "e2e")
	a := agent(t, "e2e", hubURL, agentToken)
	a.waitFor(t, 10*time.Second, `Connected to `+hubURL+` as "e2e"`)

	// A users-list token: a hub-issued one would die with this hub's key.
	kc := staticKubeconfig(t, hubURL, "e2e", adminToken)
	ctx, cancel := context.WithCancel(t.Context())
	// client-go's own default, JSON, and protobuf, which controllers use
	// for built-in kinds; the hub reads both to end a watch between events.
	watchers := []*configMapInformer{
		newConfigMapInformer(t, kc, ns, "application/json"),
		newConfigMapInformer(t, kc, ns, "application/vnd.kubernetes.protobuf"),
	}
	defer func() {
		cancel()
		for _, inf := range watchers {
			inf.stop()
		}
	}()

	create := func(name string) {
		t.Helper()
		cm := map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": name, "namespace": ns, "labels": map[string]string{"e2e": "informer"}}}
		if err := cluster.Do(t.Context(), "POST", "/api/v1/namespaces/"+ns+"/configmaps", cm, nil); err != nil {
			t.Fatal(err)
		}
	}
	remove := func(name string) {
		t.Helper()
		if err := cluster.Do(t.Context(), "DELETE", "/api/v1/namespaces/"+ns+"/configmaps/"+name, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	cached := func(want ...string) func() bool {
		return func() bool {
			for _, inf := range watchers {
				if got := inf.names(); !slices.Equal(got, want) {
					return false
				}
			}
			return true
		}
	}

	create("before")
	for _, inf := range watchers {
		inf.start(ctx)
	}
	for _, inf := range watchers {
		if !cache.WaitForCacheSync(ctx.Done(), inf.synced) {
			t.Fatalf("the %s informer's cache never synced", inf.contentType)
		}
		// The cache filled from one streaming list: a watch asking for the
		// initial events, and no LIST.
		if first := inf.log.all(); len(first) != 1 || !strings.Contains(first[0], "sendInitialEvents=true") || !strings.Contains(first[0], "watch=true") || !strings.Contains(first[0], " "+inf.contentType) || !strings.HasSuffix(first[0], " 200 OK") {
			t.Fatalf("the %s informer's requests before its cache synced: %q, want one streaming list", inf.contentType, first)
		}
	}
	within(t, 5*time.Second, "the cache holds before", cached("before"))
	create("live")
	within(t, 5*time.Second, "the cache holds live", cached("before", "live"))

	// The hub restarts on its address; meanwhile one object comes and one
	// goes.
	h.signal(syscall.SIGTERM)
	if code := h.exit(t, 30*time.Second); code != 0 {
		t.Fatalf("the hub exited %d", code)
	}
	create("while-hub-away")
	remove("before")
	hubAt(t, addr, extra, "e2e")
	back := time.Now()
	within(t, 30*time.Second, "the cache right after the hub's restart", cached("live", "while-hub-away"))
	t.Logf("the cache was right %s after the new hub listened", time.Since(back).Round(time.Millisecond))

	// The agent restarts; meanwhile one object comes and one goes.
	a.signal(syscall.SIGTERM)
	if code := a.exit(t, 30*time.Second); code != 0 {
		t.Fatalf("the agent exited %d", code)
	}
	create("while-agent-away")
	remove("live")
	a2 := agent(t, "e2e", hubURL, agentToken)
	a2.waitFor(t, 10*time.Second, `Connected to `+hubURL+` as "e2e"`)
	back = time.Now()
	within(t, 30*time.Second, "the cache right after the agent's restart", cached("while-agent-away", "while-hub-away"))
	t.Logf("the cache was right %s after the new agent connected", time.Since(back).Round(time.Millisecond))

	// And it follows the cluster live again.
	create("after")
	remove("while-hub-away")
	within(t, 5*time.Second, "the cache follows live after both restarts", cached("after", "while-agent-away"))
	for _, inf := range watchers {
		lists := 0
		for _, l := range inf.log.all() {
			if !strings.Contains(l, "watch=true") {
				lists++
			}
		}
		t.Logf("%s: %d requests in all, %d of them plain LISTs: %q", inf.contentType, len(inf.log.all()), lists, inf.log.all())
	}
}

// configMapInformer is a client-go informer on the ConfigMaps labelled
// e2e=informer in one namespace, through a kubeconfig, speaking one content
// type, with a log of its requests.
type configMapInformer struct {
	contentType string
	log         requestLog
	factory     informers.SharedInformerFactory
	lister      corelisters.ConfigMapLister
	synced      cache.InformerSynced
}

func newConfigMapInformer(t *testing.T, kubeconfig, ns, contentType string) *configMapInformer {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ContentType = contentType
	inf := &configMapInformer{contentType: contentType}
	inf.log.wrap(cfg)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	inf.factory = informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = "e2e=informer" }))
	cms := inf.factory.Core().V1().ConfigMaps()
	inf.lister, inf.synced = cms.Lister(), cms.Informer().HasSynced
	return inf
}

func (inf *configMapInformer) start(ctx context.Context) { inf.factory.Start(ctx.Done()) }

// stop waits for the informer's goroutines, once the context it started
// with is done, and closes its connections.
func (inf *configMapInformer) stop() {
	inf.factory.Shutdown()
	inf.log.close()
}

// names lists the names in the cache, sorted.
func (inf *configMapInformer) names() []string {
	cms, err := inf.lister.List(labels.Everything())
	if err != nil {
		return nil
	}
	var got []string
	for _, cm := range cms {
		got = append(got, cm.Name)
	}
	slices.Sort(got)
	return got
}

// argoCDClusterConfig is the `config` of an Argo CD cluster Secret, as Argo
// CD's ClusterConfig reads it (JSON; caData, certData and keyData are bytes,
// so base64).
type argoCDClusterConfig struct {
	Username        string `json:"username,omitempty"`
	Password        string `json:"password,omitempty"`
	BearerToken     string `json:"bearerToken,omitempty"`
	TLSClientConfig struct {
		Insecure   bool   `json:"insecure"`
		ServerName string `json:"serverName,omitempty"`
		CertData   []byte `json:"certData,omitempty"`
		KeyData    []byte `json:"keyData,omitempty"`
		CAData     []byte `json:"caData,omitempty"`
	} `json:"tlsClientConfig"`
}

// argoCDRESTConfig turns a cluster Secret into a rest.Config as Argo CD does
// for a cluster with a bearer token: server as the host, the token, and the
// TLS settings as they are.
func argoCDRESTConfig(s *corev1.Secret) (*rest.Config, error) {
	var c argoCDClusterConfig
	if err := json.Unmarshal(s.Data["config"], &c); err != nil {
		return nil, err
	}
	return &rest.Config{
		Host:        string(s.Data["server"]),
		Username:    c.Username,
		Password:    c.Password,
		BearerToken: c.BearerToken,
		TLSClientConfig: rest.TLSClientConfig{
			Insecure:   c.TLSClientConfig.Insecure,
			ServerName: c.TLSClientConfig.ServerName,
			CertData:   c.TLSClientConfig.CertData,
			KeyData:    c.TLSClientConfig.KeyData,
			CAData:     c.TLSClientConfig.CAData,
		},
	}, nil
}

// TestArgoCDClusterSecret: the cluster Secret docs/guide/people.md tells an
// Argo CD to hold for a Tether cluster (its server, a bearer token and the
// hub's CA), stored in the cluster and read back as Argo CD reads it, gives
// a client-go client that works through the hub as the tool's own person,
// with a users-list token and with a hub-issued one.
func TestArgoCDClusterSecret(t *testing.T) {
	ns := unique("argocd")
	admin(t, "create", "namespace", ns)
	admin(t, "create", "configmap", "app", "-n", ns, "--from-literal=synced=yes")
	admin(t, "create", "configmap", "app-2", "-n", ns)
	admin(t, "create", "configmap", "app-3", "-n", ns)
	admin(t, "create", "role", "reader", "-n", ns, "--verb=get,list,watch", "--resource=configmaps")
	admin(t, "create", "rolebinding", "argocd-reads", "-n", ns, "--role=reader", "--group=gitops")
	const argoToken = "argocd-e2e-token-0123456789abcdef0123456789"
	users := testUsers + "- name: argocd\n  token: " + argoToken + "\n  groups: [gitops]\n  limits: {watches: 2000}\n"
	_, hubURL := hub(t, map[string]string{"TETHER_USERS": users}, "e2e")
	a := agent(t, "e2e", hubURL, agentToken)
	a.waitFor(t, 10*time.Second, `Connected to `+hubURL+` as "e2e"`)
	ca, err := json.Marshal(hubCA.CertPEM) // base64, as the Secret holds it
	if err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct{ name, token string }{
		{"users-list token", argoToken},
		{"hub-issued token", kubeconfigToken(t, kubeconfigFor(t, hubURL, argoToken))},
	} {
		t.Run(c.name, func(t *testing.T) {
			secret := corev1.Secret{
				TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
				ObjectMeta: metav1.ObjectMeta{
					Name: "cluster-e2e-" + strings.ReplaceAll(c.name, " ", "-"), Namespace: ns,
					Labels: map[string]string{"argocd.argoproj.io/secret-type": "cluster"},
				},
				Type: corev1.SecretTypeOpaque,
				StringData: map[string]string{
					"name":   "e2e",
					"server": hubURL + "/clusters/e2e",
					"config": `{"bearerToken": "` + c.token + `", "tlsClientConfig": {"caData": ` + string(ca) + `}}`,
				},
			}
			if err := cluster.Do(t.Context(), "POST", "/api/v1/namespaces/"+ns+"/secrets", &secret, nil); err != nil {
				t.Fatal(err)
			}
			var stored corev1.Secret
			if err := cluster.Do(t.Context(), "GET", "/api/v1/namespaces/"+ns+"/secrets/"+secret.Name, nil, &stored); err != nil {
				t.Fatal(err)
			}
			cfg, err := argoCDRESTConfig(&stored)
			if err != nil {
				t.Fatalf("the Secret's config: %v", err)
			}
			var log requestLog
			log.wrap(cfg)
			defer log.close()
			cs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if v, err := cs.Discovery().ServerVersion(); err != nil || v.GitVersion != "v1.36.3" {
				t.Errorf("server version: %v, %v", v, err)
			}
			cm, err := cs.CoreV1().ConfigMaps(ns).Get(t.Context(), "app", metav1.GetOptions{})
			if err != nil || cm.Data["synced"] != "yes" {
				t.Errorf("get the app's ConfigMap: %v", err)
			}
			// Argo CD's cluster cache lists in pages: continue tokens go
			// through the hub and back.
			var paged []string
			for opts := (metav1.ListOptions{Limit: 1}); ; {
				page, err := cs.CoreV1().ConfigMaps(ns).List(t.Context(), opts)
				if err != nil {
					t.Fatalf("list a page: %v", err)
				}
				for _, cm := range page.Items {
					paged = append(paged, cm.Name)
				}
				if opts.Continue = page.Continue; opts.Continue == "" {
					break
				}
			}
			if want := []string{"app", "app-2", "app-3"}; !slices.Equal(paged, want) {
				t.Errorf("listed in pages of one: %q, want %q", paged, want)
			}
			w, err := cs.CoreV1().ConfigMaps(ns).Watch(t.Context(), metav1.ListOptions{ResourceVersion: cm.ResourceVersion})
			if err != nil {
				t.Fatalf("watch: %v", err)
			}
			w.Stop()
			// As the tool's own person: what its group may not do, it can't.
			if _, err := cs.CoreV1().Secrets(ns).List(t.Context(), metav1.ListOptions{}); err == nil || !strings.Contains(err.Error(), `User "argocd" cannot list resource "secrets"`) {
				t.Errorf("list secrets as argocd: %v", err)
			}
		})
	}
}
