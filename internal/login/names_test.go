package login

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestPrefix(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"https://tether.example.com", "tether.example.com"},
		{"https://Tether.Example.com/", "tether.example.com"},
		{"https://tether.example.com:443", "tether.example.com"},
		{"https://hub.internal:8443/k8s/", "hub.internal:8443/k8s"},
		{"http://127.0.0.1:80", "127.0.0.1"},
		{"https://[::1]:443", "[::1]"},
		{"not a url", "tether"},
	} {
		if got := Prefix(tc.url); got != tc.want {
			t.Errorf("Prefix(%q) = %q, want %q", tc.url, got, tc.want)
		}
	}
}

func TestNamesOwns(t *testing.T) {
	n := Names{Prefix: "h.example.com"}
	for name, want := range map[string]bool{
		"h.example.com/prod":     true,
		"h.example.com/":         false,
		"h.example.com":          false,
		"h.example.com/k8s/prod": false, // another hub, on a base path of the same host
		"h.example.com.evil/x":   false,
		"prod":                   false,
	} {
		if got := n.Owns(name); got != want {
			t.Errorf("Owns(%q) = %v, want %v", name, got, want)
		}
	}
}

// kubeconfigWith writes a kubeconfig holding someone's own entries, not a
// hub's: a kind cluster, current.
func kubeconfigWith(t *testing.T) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kind-dev"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:6443"}
	cfg.AuthInfos["kind-dev"] = &clientcmdapi.AuthInfo{Token: "kind-token"}
	cfg.Contexts["kind-dev"] = &clientcmdapi.Context{Cluster: "kind-dev", AuthInfo: "kind-dev", Namespace: "web"}
	cfg.CurrentContext = "kind-dev"
	path := filepath.Join(t.TempDir(), "config")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func load(t *testing.T, path string) *clientcmdapi.Config {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestMergeKeepsOthers: login merges into a kubeconfig without touching
// what isn't the hub's, two hubs' clusters named prod both stay, and a
// second login replaces only that hub's entries.
func TestMergeKeepsOthers(t *testing.T) {
	path := kubeconfigWith(t)
	a := Entries{Hub: "https://a.example.com", Names: Names{Prefix: "a.example.com"}, Clusters: []string{"prod", "staging"}, Command: "tether"}
	b := Entries{Hub: "https://b.example.org/", Names: Names{Prefix: "b.example.org"}, Clusters: []string{"prod"}, CA: []byte("PEM"), Command: "tether"}
	if err := Merge(path, a); err != nil {
		t.Fatal(err)
	}
	if err := Merge(path, b); err != nil {
		t.Fatal(err)
	}
	cfg := load(t, path)
	if cfg.CurrentContext != "kind-dev" || cfg.Contexts["kind-dev"] == nil || cfg.Contexts["kind-dev"].Namespace != "web" ||
		cfg.AuthInfos["kind-dev"] == nil || cfg.AuthInfos["kind-dev"].Token != "kind-token" || cfg.Clusters["kind-dev"] == nil {
		t.Errorf("the kind entries changed: current %q, %+v", cfg.CurrentContext, cfg.Contexts["kind-dev"])
	}
	for ctx, server := range map[string]string{
		"a.example.com/prod":    "https://a.example.com/clusters/prod",
		"a.example.com/staging": "https://a.example.com/clusters/staging",
		"b.example.org/prod":    "https://b.example.org/clusters/prod",
	} {
		c := cfg.Contexts[ctx]
		if c == nil || cfg.Clusters[c.Cluster] == nil || cfg.Clusters[c.Cluster].Server != server {
			t.Errorf("context %s: %+v, want one for %s", ctx, c, server)
		}
	}
	if got := string(cfg.Clusters["b.example.org/prod"].CertificateAuthorityData); got != "PEM" {
		t.Errorf("b's CA %q, want PEM", got)
	}
	u := cfg.AuthInfos["b.example.org"]
	if u == nil || u.Exec == nil || u.Exec.Command != "tether" || u.Exec.APIVersion != "client.authentication.k8s.io/v1" ||
		u.Exec.InteractiveMode != clientcmdapi.IfAvailableExecInteractiveMode || u.Exec.ProvideClusterInfo ||
		len(u.Exec.Args) != 3 || u.Exec.Args[0] != "credential" || u.Exec.Args[2] != "https://b.example.org/" {
		t.Errorf("b's user %+v, want tether credential --hub https://b.example.org/", u)
	}
	if cfg.Contexts["b.example.org/prod"].AuthInfo != "b.example.org" || cfg.Contexts["a.example.com/prod"].AuthInfo != "a.example.com" {
		t.Error("a context runs another hub's credential")
	}

	// a drops staging: its context and cluster go; b's and kind's stay.
	a.Clusters = []string{"prod"}
	if err := Merge(path, a); err != nil {
		t.Fatal(err)
	}
	cfg = load(t, path)
	if cfg.Contexts["a.example.com/staging"] != nil || cfg.Clusters["a.example.com/staging"] != nil {
		t.Error("a second login kept a cluster the hub no longer shows")
	}
	if len(cfg.Contexts) != 3 || len(cfg.Clusters) != 3 || len(cfg.AuthInfos) != 3 {
		t.Errorf("after a second login: contexts %d, clusters %d, users %d; want 3 each", len(cfg.Contexts), len(cfg.Clusters), len(cfg.AuthInfos))
	}
}

// TestMergeNewFile: with no kubeconfig, login makes one, its first context
// current, readable by the user alone.
func TestMergeNewFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "new", ".kube", "config")
	e := Entries{Hub: "https://a.example.com", Names: Names{Prefix: "mine"}, Clusters: []string{"dev", "prod"}, Command: "/usr/local/bin/tether"}
	if err := Merge(path, e); err != nil {
		t.Fatal(err)
	}
	cfg := load(t, path)
	if cfg.CurrentContext != "mine/dev" || len(cfg.Contexts) != 2 || cfg.AuthInfos["mine"] == nil {
		t.Errorf("current %q, contexts %d, users %v", cfg.CurrentContext, len(cfg.Contexts), cfg.AuthInfos)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the new kubeconfig: %v, %v; want mode 0600", fi.Mode(), err)
	}
}

// TestMergeKeepsForeignContext: a context someone made by hand that borrows
// a name under the hub's prefix but another user is kept, and so is the
// cluster it names.
func TestMergeKeepsForeignContext(t *testing.T) {
	path := kubeconfigWith(t)
	cfg := load(t, path)
	cfg.Clusters["a.example.com/old"] = &clientcmdapi.Cluster{Server: "https://elsewhere"}
	cfg.Contexts["a.example.com/old"] = &clientcmdapi.Context{Cluster: "a.example.com/old", AuthInfo: "kind-dev"}
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	if err := Merge(path, Entries{Hub: "https://a.example.com", Names: Names{Prefix: "a.example.com"}, Clusters: []string{"prod"}, Command: "tether"}); err != nil {
		t.Fatal(err)
	}
	cfg = load(t, path)
	if cfg.Contexts["a.example.com/old"] == nil || cfg.Clusters["a.example.com/old"] == nil {
		t.Error("login removed a context that runs another user, or its cluster")
	}
}

// TestMergeTakesKubectlsLock: login changes the kubeconfig under the lock
// kubectl takes (path.lock): while another program holds it, login leaves
// the file as it was and says why; after login, no lock is left.
func TestMergeTakesKubectlsLock(t *testing.T) {
	path := kubeconfigWith(t)
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	e := Entries{Hub: "https://a.example.com", Names: Names{Prefix: "a.example.com"}, Clusters: []string{"prod"}, Command: "tether"}
	if err := os.WriteFile(path+".lock", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	err = Merge(path, e)
	if err == nil || !strings.Contains(err.Error(), "another program is changing the kubeconfig") || !strings.Contains(err.Error(), path+".lock") {
		t.Fatalf("with the lock held elsewhere: %v", err)
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Error("login changed the kubeconfig while another program held its lock")
	}
	os.Remove(path + ".lock")
	if err := Merge(path, e); err != nil {
		t.Fatal(err)
	}
	if load(t, path).Contexts["a.example.com/prod"] == nil {
		t.Error("no context for the hub's cluster after login")
	}
	if _, err := os.Stat(path + ".lock"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("login left its lock: %v", err)
	}
}
