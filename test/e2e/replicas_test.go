package e2e

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/listfile"
	"github.com/tetherhq/tether/internal/localkube"
	"github.com/tetherhq/tether/internal/testutil/lb"
	"github.com/tetherhq/tether/internal/testutil/syncbuf"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1apply "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// replicaSet is three (or n) real `tether hub` processes coordinated
// through the test bed's API server, behind a real HAProxy (round robin,
// no stickiness, TCP: TLS, WebSockets and HTTP/2 pass through).
type replicaSet struct {
	lb    *lb.LB
	url   string   // the load balancer's, as people and agents open it
	addrs []string // each replica's own public address
	hubs  []*proc
	envs  []map[string]string
	audit []string // each replica's audit file
}

// startReplicas starts n replicas admitting the named clusters.
func startReplicas(t *testing.T, n int, names ...string) *replicaSet {
	t.Helper()
	return startReplicasWith(t, n, nil, names...)
}

// startReplicasWith is startReplicas with mod changing replica i's
// settings before it starts.
func startReplicasWith(t *testing.T, n int, mod func(i int, env map[string]string), names ...string) *replicaSet {
	t.Helper()
	ns := unique("hub")
	admin(t, "create", "namespace", ns)
	key := signingKeyFile(t)
	var list strings.Builder
	for _, name := range names {
		list.WriteString(fleet.AgentsEntry(name, listfile.TokenSHA256(agentToken)))
	}
	rs := &replicaSet{}
	for range n {
		rs.addrs = append(rs.addrs, freeAddr(t))
	}
	rs.lb = lb.Start(t, rs.addrs)
	rs.url = "https://" + rs.lb.Addr()
	for i, addr := range rs.addrs {
		certFile, keyFile := hubCert(t)
		peer := freeAddr(t)
		audit := filepath.Join(t.TempDir(), "audit.jsonl")
		rs.audit = append(rs.audit, audit)
		env := map[string]string{
			"TETHER_AUDIT_FILE":             audit,
			"TETHER_ADDR":                   addr,
			"TETHER_PUBLIC_URL":             rs.url,
			"TETHER_TLS_CERT_FILE":          certFile,
			"TETHER_TLS_KEY_FILE":           keyFile,
			"TETHER_METRICS_ADDR":           "0",
			"TETHER_FLEET_AGENTS":           list.String(),
			"TETHER_HEARTBEAT_SECONDS":      "1",
			"TETHER_USERS":                  testUsers,
			"TETHER_TOKEN_SIGNING_KEY_FILE": key,
			"TETHER_COORDINATION":           "kubernetes",
			"TETHER_COORDINATION_NAMESPACE": ns,
			"TETHER_REPLICA_NAME":           fmt.Sprintf("hub-%d", i),
			"TETHER_PEER_ADDR":              peer,
			"TETHER_PEER_LISTEN_ADDR":       peer,
			"TETHER_DRAIN_DELAY_SECONDS":    "3",
			"TETHER_SHUTDOWN_GRACE_SECONDS": "10",
			"KUBECONFIG":                    cluster.AdminKubeconfig,
		}
		if mod != nil {
			mod(i, env)
		}
		rs.envs = append(rs.envs, env)
		rs.hubs = append(rs.hubs, start(t, fmt.Sprintf("hub-%d", i), env, "hub"))
	}
	for _, h := range rs.hubs {
		h.waitFor(t, 30*time.Second, "Tether hub listening")
	}
	return rs
}

// restart starts replica i again, as a Deployment's new pod would.
func (rs *replicaSet) restart(t *testing.T, i int) {
	t.Helper()
	env := map[string]string{}
	for k, v := range rs.envs[i] {
		env[k] = v
	}
	rs.hubs[i] = start(t, fmt.Sprintf("hub-%d (again)", i), env, "hub")
	rs.hubs[i].waitFor(t, 60*time.Second, "Tether hub listening")
}

// signingKeyFile writes a new Ed25519 signing key, as the chart's Secret
// holds it.
func signingKeyFile(t *testing.T) string {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "signing-key.pem")
	if err := os.WriteFile(f, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// statuses returns the clusters' statuses as the hub at url shows them to
// the admin.
func statuses(t *testing.T, url string) map[string]string {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(hubCA.CertPEM)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer client.CloseIdleConnections()
	req, _ := http.NewRequest("GET", url+"/api/clusters", nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := client.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var list []struct {
		Name, Status string
	}
	if json.NewDecoder(resp.Body).Decode(&list) != nil {
		return nil
	}
	out := map[string]string{}
	for _, c := range list {
		out[c.Name] = c.Status
	}
	return out
}

// allReady reports whether every replica still running shows every named
// cluster Ready.
func (rs *replicaSet) allReady(t *testing.T, skip int, names ...string) bool {
	for i, addr := range rs.addrs {
		if i == skip {
			continue
		}
		st := statuses(t, "https://"+addr)
		for _, n := range names {
			if st[n] != "Ready" {
				return false
			}
		}
	}
	return true
}

// TestReplicasServeAsOneHub: three replicas behind a load balancer give
// people what one hub would, whichever replica a request and an agent land
// on: every cluster Ready on every replica, and kubectl's requests,
// streams, exec and port-forward reaching clusters whose agents other
// replicas hold.
func TestReplicasServeAsOneHub(t *testing.T) {
	names := []string{"rep-a", "rep-b", "rep-c"}
	rs := startReplicas(t, 3, names...)
	for _, n := range names {
		agent(t, n, rs.url, agentToken)
	}
	within(t, 30*time.Second, "every replica shows every cluster Ready", func() bool { return rs.allReady(t, -1, names...) })

	ns := unique("replicas")
	admin(t, "create", "namespace", ns)
	setUpPeople(t, unique("ra"), unique("rb"))
	for _, n := range names {
		k := staticKubeconfig(t, rs.url, n, adminToken)
		// Round robin: three requests land on three replicas, two of
		// which forward to the one holding the agent.
		for i := range 3 {
			if out, err := kubectl(t, k, "get", "namespace", ns, "-o", "name"); err != nil || strings.TrimSpace(out) != "namespace/"+ns {
				t.Fatalf("%s, request %d: %q, %v", n, i, out, err)
			}
		}
	}

	// Each request has one audit line, on the replica that received it;
	// one that another replica carried names it.
	var carried, lines int
	ids := map[string]int{}
	for _, f := range rs.audit {
		b, _ := os.ReadFile(f)
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var rec struct{ RequestID, Replica, Cluster string }
			if json.Unmarshal([]byte(l), &rec) != nil {
				continue
			}
			lines++
			ids[rec.RequestID]++
			if rec.Replica != "" {
				carried++
			}
		}
	}
	if carried == 0 || lines < 9 {
		t.Errorf("%d audit lines, %d naming the replica that carried the request; want at least 9, some carried", lines, carried)
	}
	for id, n := range ids {
		if n > 1 {
			t.Errorf("request %s has %d audit lines", id, n)
		}
	}

	root := staticKubeconfig(t, rs.url, "rep-a", adminToken)
	work := t.TempDir()
	createPod(t, ns, "clock", map[string]any{"command": []string{"sh", "-c", "echo hello; while true; do date; sleep 1; done"}, "workingDir": work}, "Always")
	if out, err := kubectl(t, root, "wait", "-n", ns, "pod/clock", "--for=condition=Ready", "--timeout=60s"); err != nil {
		t.Fatalf("wait: %v %s", err, out)
	}
	for _, tr := range transports {
		for i := range 3 { // each lands on another replica
			cmd := cluster.KubectlCommand(t.Context(), root, "exec", "-i", "-n", ns, "clock", "--", "cat")
			cmd.Env = append(cmd.Env, tr.env...)
			cmd.Stdin = strings.NewReader("ping\n")
			out, err := cmd.CombinedOutput()
			if err != nil || string(out) != "ping\n" {
				t.Errorf("exec over %s, %d: %q, %v", tr.name, i, out, err)
			}
		}
		portForward(t, ns, "echo-"+tr.name, func(env []string, args ...string) *exec.Cmd {
			cmd := cluster.KubectlCommand(t.Context(), root, args...)
			cmd.Env = append(cmd.Env, env...)
			return cmd
		}, tr.env)
	}

	// A watch through each replica in turn (the create between them moves
	// the round robin on by one more): two of them go through the holder,
	// which splices them to the agent, and each sees the event it waits for.
	if out, err := kubectl(t, root, "create", "configmap", "-n", ns, "watched-before"); err != nil {
		t.Fatalf("create: %v %s", err, out)
	}
	for i := range 3 {
		w := startKubectl(t, root, nil, "get", "configmaps", "-n", ns, "-w", "--output-watch-events", "-o", "jsonpath={.type} {.object.metadata.name}{\"\\n\"}")
		waitOutput(t, w.out, "ADDED watched-before\n")
		name := fmt.Sprintf("watched-%d", i)
		if out, err := kubectl(t, root, "create", "configmap", "-n", ns, name); err != nil {
			t.Fatalf("create: %v %s", err, out)
		}
		waitOutput(t, w.out, "ADDED "+name+"\n")
		w.cmd.Process.Signal(os.Interrupt)
		w.ended(t, 10*time.Second, "kubectl get --watch")
	}
	// Their audit lines, written as they ended: some carried.
	within(t, 5*time.Second, "an audit line of a watch another replica carried", func() bool {
		for _, f := range rs.audit {
			b, _ := os.ReadFile(f)
			for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				var rec struct{ Verb, Replica string }
				if json.Unmarshal([]byte(l), &rec) == nil && rec.Verb == "watch" && rec.Replica != "" {
					return true
				}
			}
		}
		return false
	})
}

// TestTakeoverAcrossReplicas: an agent connecting as a cluster whose agent
// another replica holds takes it over, as on one hub: the older one is told
// another agent connected as it, and stops.
func TestTakeoverAcrossReplicas(t *testing.T) {
	rs := startReplicas(t, 2, "twice")
	first := agent(t, "twice", "https://"+rs.addrs[0], agentToken)
	first.waitFor(t, 10*time.Second, `Connected to https://`+rs.addrs[0]+` as "twice"`)
	within(t, 20*time.Second, "both replicas show it Ready", func() bool { return rs.allReady(t, -1, "twice") })
	agent(t, "twice", "https://"+rs.addrs[1], agentToken)
	first.waitFor(t, 10*time.Second, "another agent connected as it")
	if code := first.exit(t, 10*time.Second); code == 0 {
		t.Errorf("the agent taken over exited %d", code)
	}
	within(t, 20*time.Second, "it is Ready again on both", func() bool { return rs.allReady(t, -1, "twice") })
}

// TestAReplicaKilled: SIGKILL a replica; its agents connect to the others,
// and every cluster is Ready again on every replica left within 20 s.
func TestAReplicaKilled(t *testing.T) {
	names := []string{"kill-a", "kill-b", "kill-c", "kill-d"}
	rs := startReplicas(t, 3, names...)
	for _, n := range names {
		agent(t, n, rs.url, agentToken)
	}
	within(t, 30*time.Second, "every cluster Ready everywhere", func() bool { return rs.allReady(t, -1, names...) })
	rs.hubs[0].signal(syscall.SIGKILL)
	killed := time.Now()
	within(t, 30*time.Second, "every cluster Ready again on the replicas left", func() bool { return rs.allReady(t, 0, names...) })
	if d := time.Since(killed); d > 20*time.Second {
		t.Errorf("the clusters took %s to be Ready again, want at most 20 s", d.Round(time.Second))
	}
}

// TestTwoReplicasWithOneName: a second replica started with the name of
// one that runs is refused, and says why.
func TestTwoReplicasWithOneName(t *testing.T) {
	rs := startReplicas(t, 1, "one")
	env := map[string]string{}
	for k, v := range rs.envs[0] {
		env[k] = v
	}
	env["TETHER_ADDR"] = freeAddr(t)
	peer := freeAddr(t)
	env["TETHER_PEER_ADDR"], env["TETHER_PEER_LISTEN_ADDR"] = peer, peer
	second := start(t, "hub-0 again", env, "hub")
	if code := second.exit(t, 60*time.Second); code == 0 {
		t.Errorf("the second replica named hub-0 exited %d, want a refusal", code)
	}
	second.waitFor(t, time.Second, "TETHER_REPLICA_NAME")
}

// TestRollingUpdateFailsNoRequest: each replica in turn is stopped as a
// Deployment stops a pod (SIGTERM; the load balancer takes it out a
// moment later, as endpoints follow a failing /readyz) and started again,
// while a client-go client keeps getting, listing and applying on every
// cluster through the load balancer. It sees no failure: agents move
// make-before-break, requests follow them, and the client waits out any
// Retry-After as it does for an API server.
func TestRollingUpdateFailsNoRequest(t *testing.T) {
	names := []string{"roll-a", "roll-b", "roll-c"}
	rs := startReplicas(t, 3, names...)
	for _, n := range names {
		agent(t, n, rs.url, agentToken)
	}
	within(t, 30*time.Second, "every cluster Ready everywhere", func() bool { return rs.allReady(t, -1, names...) })
	ns := unique("roll")
	admin(t, "create", "namespace", ns)
	admin(t, "create", "clusterrolebinding", unique("roll-admins"), "--clusterrole=cluster-admin", "--group=tether:admins")

	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	var requests, failures atomic.Int64
	var failed syncbuf.Buffer
	for _, n := range names {
		client, err := kubernetes.NewForConfig(&rest.Config{Host: rs.url + "/clusters/" + n, BearerToken: adminToken,
			TLSClientConfig: rest.TLSClientConfig{CAData: hubCA.CertPEM}, QPS: 100, Burst: 100})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				var err error
				switch i % 3 {
				case 0:
					_, err = client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
				case 1:
					_, err = client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
				case 2:
					cm := corev1apply.ConfigMap(n, ns).WithData(map[string]string{"i": strconv.Itoa(i)})
					_, err = client.CoreV1().ConfigMaps(ns).Apply(ctx, cm, metav1.ApplyOptions{FieldManager: "e2e", Force: true})
				}
				if ctx.Err() != nil {
					return
				}
				requests.Add(1)
				if err != nil {
					failures.Add(1)
					fmt.Fprintf(&failed, "%s %s request %d: %v\n", time.Now().Format("15:04:05.000"), n, i, err)
				}
				time.Sleep(100 * time.Millisecond) // about 10 a second for each cluster
			}
		}()
	}
	began := time.Now()
	for i := range rs.hubs {
		rs.hubs[i].signal(syscall.SIGTERM)
		rs.hubs[i].waitFor(t, 5*time.Second, "Draining")
		rs.lb.Disable(i)
		if code := rs.hubs[i].exit(t, 60*time.Second); code != 0 {
			t.Errorf("replica %d exited %d", i, code)
		}
		rs.restart(t, i)
		rs.lb.Enable(i)
		within(t, 30*time.Second, "every cluster Ready everywhere again", func() bool { return rs.allReady(t, -1, names...) })
	}
	took := time.Since(began)
	stop()
	wg.Wait()
	t.Logf("rolling update of 3 replicas: %s, %d requests, %d failed", took.Round(time.Second), requests.Load(), failures.Load())
	if failures.Load() > 0 {
		t.Errorf("%d of %d requests failed during the rolling update:\n%s", failures.Load(), requests.Load(), failed.String())
	}
}

// TestSignOutAndInventoryOnEveryReplica: a person signed in to the page through
// one replica and signed out through it is signed out on the others too,
// within 2 s; and the fleet's inventory and status answer on every
// replica alike.
func TestSignOutAndInventoryOnEveryReplica(t *testing.T) {
	if err := cluster.GrantInventory(t.Context(), localkube.Namespace, localkube.ServiceAccount); err != nil {
		t.Fatal(err)
	}
	rs := startReplicas(t, 2, "out")
	agent(t, "out", "https://"+rs.addrs[0], agentToken)
	within(t, 20*time.Second, "Ready on both", func() bool { return rs.allReady(t, -1, "out") })
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(hubCA.CertPEM)
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer client.CloseIdleConnections()
	a, b := "https://"+rs.addrs[0], "https://"+rs.addrs[1]
	if code := postTo(t, client, a+"/login", rs.url, url.Values{"token": {adminToken}}); code != http.StatusOK {
		t.Fatalf("sign-in on replica 0: %d", code)
	}
	// The session's cookie, kept: signing out clears it in the browser,
	// and what is tested is that a copy kept elsewhere is void.
	session := jar.Cookies(&url.URL{Scheme: "https", Host: rs.addrs[1]})
	if len(session) == 0 {
		t.Fatal("no session cookie after signing in")
	}
	page := func(hub string) int {
		req, _ := http.NewRequest("GET", hub+"/api/clusters", nil)
		for _, c := range session {
			req.AddCookie(c)
		}
		resp, err := (&http.Client{Transport: client.Transport}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := page(b); code != http.StatusOK {
		t.Fatalf("the session on replica 1: %d, want 200", code)
	}
	if code := postTo(t, client, a+"/logout", rs.url, nil); code >= 400 {
		t.Fatalf("sign-out on replica 0: %d", code)
	}
	within(t, 2*time.Second, "the session refused on replica 1", func() bool { return page(b) == http.StatusUnauthorized })

	// The inventory of the cluster replica 0 holds, asked of replica 1:
	// carried to replica 0, answered with its access reviews as the person.
	ns := unique("inv")
	admin(t, "create", "namespace", ns)
	admin(t, "create", "clusterrolebinding", unique("out-admins"), "--clusterrole=cluster-admin", "--group=tether:admins")
	mustCreatePod(t, ns, "seen")
	for _, path := range []string{"/api/clusters/out/resources?kind=pods&namespace=" + ns, "/api/resources?kind=pods&namespace=" + ns} {
		within(t, 30*time.Second, path+" on replica 1 has the pod", func() bool {
			var items []item
			return apiGet(t, b, adminToken, path, &items) == http.StatusOK && len(items) == 1 && items[0].Name == "seen" && items[0].Cluster == "out"
		})
	}
}

// postTo posts form to u with Origin origin, as the page does, and returns
// the status of the page it ends on.
func postTo(t *testing.T, client *http.Client, u, origin string, form url.Values) int {
	t.Helper()
	req, _ := http.NewRequest("POST", u, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", origin)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestUsersListHoldsOnEveryReplica: each replica reads its own users file,
// which a Secret volume updates on each pod at its own time. A person the
// list drops is refused on every replica within 2 s of the first replica
// reading the new list, and the others' files catching up later changes
// nothing.
func TestUsersListHoldsOnEveryReplica(t *testing.T) {
	files := make([]string, 2)
	rs := startReplicasWith(t, 2, func(i int, env map[string]string) {
		files[i] = filepath.Join(t.TempDir(), "users.yaml")
		if err := os.WriteFile(files[i], []byte(testUsers), 0o600); err != nil {
			t.Fatal(err)
		}
		delete(env, "TETHER_USERS")
		env["TETHER_USERS_FILE"] = files[i]
	}, "people")
	b := "https://" + rs.addrs[1]
	if code := apiGet(t, b, aliceToken, "/api/clusters", nil); code != http.StatusOK {
		t.Fatalf("alice on replica 1 before: %d", code)
	}
	without := strings.Replace(testUsers, "- name: alice\n  token: "+aliceToken+"\n  groups: [dev]\n", "", 1)
	if without == testUsers {
		t.Fatal("the test's users list has no alice entry to drop")
	}
	if err := os.WriteFile(files[0], []byte(without), 0o600); err != nil {
		t.Fatal(err)
	}
	within(t, 5*time.Second, "replica 0 takes its new list in", func() bool {
		return apiGet(t, "https://"+rs.addrs[0], aliceToken, "/api/clusters", nil) == http.StatusUnauthorized
	})
	within(t, 2*time.Second, "alice refused on replica 1, whose file is as before", func() bool {
		return apiGet(t, b, aliceToken, "/api/clusters", nil) == http.StatusUnauthorized
	})
	if err := os.WriteFile(files[1], []byte(without), 0o600); err != nil {
		t.Fatal(err)
	}
	// Replica 1 takes the same bytes in as the list in force, and
	// nothing changes.
	rs.hubs[1].waitFor(t, 10*time.Second, "The users list changed to the one in force already")
	if code := apiGet(t, b, adminToken, "/api/clusters", nil); code != http.StatusOK {
		t.Errorf("admin on replica 1 once its file caught up: %d", code)
	}
	if code := apiGet(t, b, aliceToken, "/api/clusters", nil); code != http.StatusUnauthorized {
		t.Errorf("alice on replica 1 once its file caught up: %d", code)
	}
}
