package replicas

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"

	"github.com/tetherhq/tether/internal/localkube"
	"go.uber.org/goleak"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// The tests share one real API server: it takes seconds to start. It starts on the first
// test's call to apiServer, not in TestMain: a fuzz target's workers run TestMain too.
var (
	clusterOnce sync.Once
	cluster     *localkube.Cluster
	clusterErr  error
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	code := m.Run()
	if cluster != nil {
		if err := cluster.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "stop the test API server:", err)
		}
	}
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1")); err != nil {
			fmt.Fprintln(os.Stderr, "leaked goroutines:", err)
			return 1
		}
	}
	return code
}

func apiServer(t *testing.T) *localkube.Cluster {
	t.Helper()
	clusterOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()
		cluster, clusterErr = localkube.Start(ctx, localkube.Config{
			Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		})
	})
	if clusterErr != nil {
		t.Fatalf("start the test API server: %v", clusterErr)
	}
	return cluster
}

// stopRenewing stops renewing the Lease without deleting it, as a replica killed with SIGKILL
// does.
func (r *Replicas) stopRenewing() {
	r.renewCancel()
	<-r.renewDone
}

// writes counts the requests a client makes that write Leases, and says when one is made.
type writes struct {
	mu      sync.Mutex
	methods map[string]int
	n       int
	made    chan struct{} // buffered 1
}

func (w *writes) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

type countingTransport struct {
	next http.RoundTripper
	w    *writes
}

func (c countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet && strings.Contains(req.URL.Path, "/leases") {
		c.w.mu.Lock()
		c.w.n++
		c.w.methods[req.Method]++
		c.w.mu.Unlock()
		select {
		case c.w.made <- struct{}{}:
		default:
		}
	}
	return c.next.RoundTrip(req)
}

// newClient is a client of the test API server as its admin, counting its writes of Leases.
func newClient(t *testing.T) (*Client, *writes) {
	t.Helper()
	c := apiServer(t)
	w := &writes{methods: map[string]int{}, made: make(chan struct{}, 1)}
	cfg := &rest.Config{
		Host:            c.URL,
		BearerToken:     c.AdminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.CAPEM},
		WrapTransport:   func(rt http.RoundTripper) http.RoundTripper { return countingTransport{rt, w} },
	}
	client, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client, w
}

// adminLeases are the Leases in ns, through client-go's clientset, as an admin reads
// and writes them.
func adminLeases(t *testing.T, ns string) coordinationclient.LeaseInterface {
	t.Helper()
	return adminClientset(t).CoordinationV1().Leases(ns)
}

func adminClientset(t *testing.T) kubernetes.Interface {
	t.Helper()
	c := apiServer(t)
	client, err := kubernetes.NewForConfig(&rest.Config{Host: c.URL, BearerToken: c.AdminToken, TLSClientConfig: rest.TLSClientConfig{CAData: c.CAPEM}})
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// newNamespace makes a namespace of the test's own, so tests don't see each other's Leases.
func newNamespace(t *testing.T) string {
	t.Helper()
	client := adminClientset(t)
	name := strings.Trim(regexp.MustCompile(`[^a-z0-9]+`).ReplaceAllString(strings.ToLower(t.Name()), "-"), "-")
	// Generated: -count=2 runs each test again on the same API server.
	ns, err := client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "r-" + name[:min(len(name), 50)] + "-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func newKey(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// testConfig is a Config for replica name in ns, with short durations.
func testConfig(t *testing.T, ns, name string, key ed25519.PrivateKey) Config {
	cfg, _ := countedConfig(t, ns, name, key)
	return cfg
}

// countedConfig is testConfig's, and the count of its client's writes.
func countedConfig(t *testing.T, ns, name string, key ed25519.PrivateKey) (Config, *writes) {
	client, w := newClient(t)
	return Config{
		Logger:        slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("replica", name),
		Client:        client,
		Namespace:     ns,
		Name:          name,
		PeerAddr:      "127.0.0.1:8444",
		SigningKeys:   []ed25519.PrivateKey{key},
		LeaseDuration: 2 * time.Second,
		RenewInterval: 500 * time.Millisecond,
	}, w
}

func join(t *testing.T, cfg Config) *Replicas {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := Join(ctx, cfg)
	if err != nil {
		t.Fatalf("join %s: %v", cfg.Name, err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("close %s: %v", cfg.Name, err)
		}
	})
	return r
}

// waitMembers waits until r's members are those named, in that order, or fails after within.
func waitMembers(t *testing.T, r *Replicas, within time.Duration, names ...string) {
	t.Helper()
	timeout := time.NewTimer(within)
	defer timeout.Stop()
	for {
		got := memberNames(r.Members())
		if got == strings.Join(names, ",") {
			return
		}
		select {
		case <-r.Changed():
		case <-timeout.C:
			t.Fatalf("%s's members are [%s] after %s, want [%s]", r.Self().Name, got, within, strings.Join(names, ","))
		}
	}
}

func memberNames(ms []Member) string {
	names := make([]string, len(ms))
	for i, m := range ms {
		names[i] = m.Name
	}
	return strings.Join(names, ",")
}

func TestMembersSeeEachOtherAndLeave(t *testing.T) {
	ns, key := newNamespace(t), newKey(t)
	rs := map[string]*Replicas{}
	for i, name := range []string{"a", "b", "c"} {
		cfg := testConfig(t, ns, name, key)
		cfg.PeerAddr = fmt.Sprintf("10.0.0.%d:8444", i+1)
		// Long enough that only Close's delete can drop c within the wait below.
		cfg.LeaseDuration, cfg.RenewInterval = time.Minute, 20*time.Second
		rs[name] = join(t, cfg)
	}
	waitMembers(t, rs["a"], 10*time.Second, "b", "c")
	waitMembers(t, rs["b"], 10*time.Second, "a", "c")
	waitMembers(t, rs["c"], 10*time.Second, "a", "b")
	for name, r := range rs {
		for _, m := range r.Members() {
			if want := rs[m.Name].Self(); !m.equal(want) {
				t.Errorf("%s sees %s as %+v, which publishes %+v", name, m.Name, m, want)
			}
		}
		if _, ok := r.Member(name); ok {
			t.Errorf("%s is among its own members", name)
		}
	}
	if m, ok := rs["a"].Member("b"); !ok || m.PeerAddr != "10.0.0.2:8444" {
		t.Errorf("a's Member(b) = %+v, %v", m, ok)
	}

	if err := rs["c"].Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-rs["c"].Done():
	default:
		t.Error("Done is open after Close")
	}
	if !errors.Is(rs["c"].Err(), ErrClosed) {
		t.Errorf("Err after Close = %v, want ErrClosed", rs["c"].Err())
	}
	waitMembers(t, rs["a"], 10*time.Second, "b")
	waitMembers(t, rs["b"], 10*time.Second, "a")
	if _, err := adminLeases(t, ns).Get(context.Background(), LeasePrefix+"c", metav1.GetOptions{}); err == nil {
		t.Error("c's Lease is still there after Close")
	}
}

func TestStoppedRenewalDropsOut(t *testing.T) {
	ns, key := newNamespace(t), newKey(t)
	a := join(t, testConfig(t, ns, "a", key))
	b := join(t, testConfig(t, ns, "b", key))
	waitMembers(t, a, 10*time.Second, "b")
	b.stopRenewing()
	stopped := time.Now()
	waitMembers(t, a, 10*time.Second)
	took := time.Since(stopped)
	t.Logf("a dropped b %s after b stopped renewing (lease 2 s, renewal 0.5 s)", took.Round(time.Millisecond))
	// b renewed at most one interval before it stopped; a drops it a lease after that.
	if took < 1500*time.Millisecond {
		t.Errorf("a dropped b after %s, before its lease could expire", took)
	}
	if _, err := adminLeases(t, ns).Get(context.Background(), LeasePrefix+"b", metav1.GetOptions{}); err != nil {
		t.Errorf("b's Lease: %v; it should be left as a killed replica leaves it", err)
	}
	if b.Err() != nil {
		t.Errorf("b.Err() = %v", b.Err())
	}
}

func TestSameNameRefusedWhileRenewed(t *testing.T) {
	ns, key := newNamespace(t), newKey(t)
	first := join(t, testConfig(t, ns, "a", key))

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	_, err := Join(ctx, testConfig(t, ns, "a", key))
	if !errors.Is(err, ErrNameTaken) {
		t.Fatalf("second Join of a: %v, want ErrNameTaken", err)
	}
	t.Logf("refused after %s: %v", time.Since(start).Round(time.Millisecond), err)
	for _, want := range []string{"TETHER_REPLICA_NAME", `"a"`, ns + "/" + LeasePrefix + "a"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q doesn't name %s", err, want)
		}
	}
	if time.Since(start) < 2*time.Second {
		t.Errorf("refused after %s, before a lease duration", time.Since(start))
	}
	if first.Err() != nil {
		t.Fatalf("the first holder: %v", first.Err())
	}

	// As after a SIGKILL: the Lease stays, unrenewed, and the restarted replica waits it out.
	first.stopRenewing()
	second := join(t, testConfig(t, ns, "a", key))
	got, err := adminLeases(t, ns).Get(context.Background(), LeasePrefix+"a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if holderOf(got) != second.holder || *got.Spec.LeaseTransitions != 1 {
		t.Errorf("Lease held by %q after %d transitions, want %q after 1", holderOf(got), *got.Spec.LeaseTransitions, second.holder)
	}
}

func TestLostName(t *testing.T) {
	ns, key := newNamespace(t), newKey(t)
	a := join(t, testConfig(t, ns, "a", key))
	leases := adminLeases(t, ns)
	l, err := leases.Get(context.Background(), LeasePrefix+"a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other := "a/someone-else"
	for {
		l.Spec.HolderIdentity = &other
		if _, err = leases.Update(context.Background(), l, metav1.UpdateOptions{}); err == nil {
			break
		}
		if l, err = leases.Get(context.Background(), LeasePrefix+"a", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-a.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done is still open 10 s after another took the name")
	}
	if err := a.Err(); !errors.Is(err, ErrNameLost) || !strings.Contains(err.Error(), other) {
		t.Errorf("Err() = %v, want ErrNameLost naming %q", err, other)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if got, err := leases.Get(context.Background(), LeasePrefix+"a", metav1.GetOptions{}); err != nil || holderOf(got) != other {
		t.Errorf("after Close the Lease is %v, %v; the new holder's should stay", got, err)
	}
}

func TestLeftoverLeases(t *testing.T) {
	ns, key := newNamespace(t), newKey(t)
	// Leases of replicas long gone, one of them with this replica's name.
	for _, name := range []string{"a", "gone"} {
		l := signedLease(t, ns, name, key, time.Now().Add(-time.Hour))
		if _, err := adminLeases(t, ns).Create(context.Background(), l, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := testConfig(t, ns, "a", key)
	cfg.LeaseDuration, cfg.RenewInterval = time.Minute, 20*time.Second
	start := time.Now()
	a := join(t, cfg)
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("Join waited %s for a Lease renewed an hour ago", took)
	}
	if got := memberNames(a.Members()); got != "" {
		t.Errorf("members at Join: [%s], want none: gone's Lease was renewed an hour ago", got)
	}
}

// signedLease is a Lease as a replica called name would hold it, renewed at renewed.
func signedLease(t *testing.T, ns, name string, key ed25519.PrivateKey, renewed time.Time) *coordinationv1.Lease {
	t.Helper()
	id, err := newIdentity(name, "127.0.0.1:1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	holder, secs, at := name+"/test", int32(15), metav1.NewMicroTime(renewed)
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
		Name: LeasePrefix + name, Namespace: ns,
		Labels:      map[string]string{LabelRole: RoleHubReplica},
		Annotations: annotations(id.member, key),
	}}
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = &holder, &secs, &at
	return l
}

// logLines is a slog handler's output, safe to read while it is written.
type logLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// TestStaleViewKeepsMembers: a replica that doesn't see its own renewals (here, it stops
// making them, as when it can't reach the API server) can't tell a dead peer from a silent
// watch, and keeps the members it has; a replica whose view is fresh drops them.
func TestStaleViewKeepsMembers(t *testing.T) {
	ns, key := newNamespace(t), newKey(t)
	a := join(t, testConfig(t, ns, "a", key))
	b := join(t, testConfig(t, ns, "b", key))
	cfg, cWrites := countedConfig(t, ns, "c", key)
	c := join(t, cfg)
	waitMembers(t, a, 10*time.Second, "b", "c")
	waitMembers(t, c, 10*time.Second, "a", "b")
	a.stopRenewing()
	b.stopRenewing()
	waitMembers(t, c, 10*time.Second)
	// Two more of c's renewals: past the moment a would have dropped b, had its view been fresh.
	timeout := time.After(10 * time.Second)
	for n := cWrites.count() + 2; cWrites.count() < n; {
		select {
		case <-cWrites.made:
		case <-timeout:
			t.Fatal("c stopped renewing")
		}
	}
	if got := memberNames(a.Members()); got != "b,c" {
		t.Errorf("a's members with its view stale: [%s], want [b,c]", got)
	}
}
