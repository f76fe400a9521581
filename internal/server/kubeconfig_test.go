package server

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/tetherhq/tether/internal/testutil/fakecluster"
)

// TestKubeconfigSpec: GET /api/kubeconfig (SPEC section 3) answers with
// Cache-Control: no-store, a cluster for every cluster the person sees at
// the hub's TETHER_PUBLIC_URL, and a hub-issued token that works as that
// person.
func TestKubeconfigSpec(t *testing.T) {
	h, _ := proxyHub(t, fakecluster.New(t), "")
	code, body, hdr := call(t, "GET", h.url+"/api/kubeconfig", aliceToken, nil)
	if code != http.StatusOK {
		t.Fatalf("GET /api/kubeconfig: %d %s", code, body)
	}
	if got := hdr.Get("Cache-Control"); got != "no-store" {
		t.Errorf("Cache-Control %q, want no-store", got)
	}
	var kc struct {
		Clusters []struct {
			Name    string
			Cluster struct{ Server string }
		}
		Users []struct {
			Name string
			User struct{ Token string }
		}
		Contexts []struct {
			Name    string
			Context struct{ Cluster, User string }
		}
		CurrentContext string `json:"current-context"`
	}
	if err := yaml.Unmarshal([]byte(body), &kc); err != nil {
		t.Fatal(err)
	}
	servers := map[string]string{}
	for _, c := range kc.Clusters {
		servers[c.Name] = c.Cluster.Server
	}
	// alice (group dev) sees open and far, not ops, named after the hub's
	// host like tether login's contexts (decision 036).
	want := map[string]string{"hub.example.com/far": "https://hub.example.com/clusters/far", "hub.example.com/open": "https://hub.example.com/clusters/open"}
	if len(servers) != len(want) || servers["hub.example.com/far"] != want["hub.example.com/far"] || servers["hub.example.com/open"] != want["hub.example.com/open"] {
		t.Errorf("clusters %v, want %v", servers, want)
	}
	if len(kc.Users) != 1 || kc.Users[0].User.Token == "" || kc.Users[0].User.Token == aliceToken || kc.Users[0].Name != "hub.example.com" {
		t.Fatalf("users %+v, want one named hub.example.com with a hub-issued token", kc.Users)
	}
	if len(kc.Contexts) != 2 || kc.Contexts[0].Name != "hub.example.com/far" || kc.Contexts[0].Context.Cluster != "hub.example.com/far" ||
		kc.Contexts[0].Context.User != "hub.example.com" || kc.CurrentContext != "hub.example.com/far" {
		t.Errorf("contexts %+v, current %q; want hub.example.com/far and /open, far current", kc.Contexts, kc.CurrentContext)
	}
	code, body, _ = call(t, "GET", h.url+"/api/clusters", kc.Users[0].User.Token, nil)
	if code != http.StatusOK || !strings.Contains(body, `"name":"open"`) || strings.Contains(body, `"name":"ops"`) {
		t.Errorf("the kubeconfig's token at /api/clusters: %d %s, want alice's clusters", code, body)
	}
}

// TestOpenAudit: TETHER_AUDIT_FILE "-" is standard output (SPEC section 2,
// the default); a path is appended to, not truncated.
func TestOpenAudit(t *testing.T) {
	w, closeFn, err := openAudit("-")
	if err != nil || w != os.Stdout {
		t.Fatalf(`openAudit("-") = %v, %v; want standard output`, w, err)
	}
	closeFn()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	if err := os.WriteFile(path, []byte("{\"earlier\":1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	w, closeFn, err = openAudit(path)
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("{\"later\":2}\n"))
	closeFn()
	if b, _ := os.ReadFile(path); string(b) != "{\"earlier\":1}\n{\"later\":2}\n" {
		t.Errorf("the audit file holds %q, want the earlier line kept and the new one appended", b)
	}
	if _, _, err := openAudit(filepath.Join(t.TempDir(), "no", "such", "dir", "audit")); err == nil || !strings.HasPrefix(err.Error(), "TETHER_AUDIT_FILE ") {
		t.Errorf("an audit file that can't be written: %v, want an error naming TETHER_AUDIT_FILE", err)
	}
}
