package watch

import (
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tetherhq/tether/internal/inventory"
	"github.com/tetherhq/tether/internal/pki"
)

// coreAggregated and groupsAggregated are shaped as kube-apiserver's
// answers to GET /api and /apis with acceptDiscovery (trimmed).
const coreAggregated = `{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","metadata":{},
"items":[{"metadata":{"creationTimestamp":null},"versions":[{"version":"v1","resources":[
 {"resource":"pods","responseKind":{"group":"","version":"v1","kind":"Pod"},"scope":"Namespaced","singularResource":"pod","verbs":["get","list","watch"],
  "subresources":[{"subresource":"log","verbs":["get"]}]},
 {"resource":"nodes","scope":"Cluster","verbs":["get","list","watch"]},
 {"resource":"namespaces","scope":"Cluster","verbs":["get","list","watch"]},
 {"resource":"services","scope":"Namespaced","verbs":["get","list","watch"]}],"freshness":"Current"}]}]}`

const groupsAggregated = `{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","metadata":{},
"items":[
 {"metadata":{"name":"apps"},"versions":[{"version":"v1","resources":[{"resource":"deployments","scope":"Namespaced"},{"resource":"statefulsets","scope":"Namespaced"},{"resource":"daemonsets","scope":"Namespaced"}]}]},
 {"metadata":{"name":"networking.istio.io"},"versions":[
   {"version":"v1beta1","resources":[{"resource":"gateways","scope":"Namespaced"}]},
   {"version":"v1","resources":[{"resource":"gateways","scope":"Namespaced"}]},
   {"version":"v1alpha3","resources":[{"resource":"gateways","scope":"Namespaced"}]}]},
 {"metadata":{"name":"argoproj.io"},"versions":[{"version":"v1beta9","resources":[{"resource":"applications","scope":"Namespaced"}]}],"freshness":"Stale"},
 {"metadata":{"name":"batch"},"versions":[{"version":"v1","resources":[{"resource":"jobs","scope":"Namespaced"},{"resource":"jobs/status"}]}]}]}`

func TestParseAggregated(t *testing.T) {
	d := discovered{}
	for _, b := range []string{coreAggregated, groupsAggregated} {
		if err := parseAggregated([]byte(b), d); err != nil {
			t.Fatal(err)
		}
	}
	want := discovered{
		"":                    {{version: "v1", resources: []string{"pods", "nodes", "namespaces", "services"}, clusterScoped: []string{"nodes", "namespaces"}}},
		"apps":                {{version: "v1", resources: []string{"deployments", "statefulsets", "daemonsets"}}},
		"networking.istio.io": {{version: "v1beta1", resources: []string{"gateways"}}, {version: "v1", resources: []string{"gateways"}}, {version: "v1alpha3", resources: []string{"gateways"}}},
		"argoproj.io":         {{version: "v1beta9", resources: []string{"applications"}}},
		"batch":               {{version: "v1", resources: []string{"jobs"}}},
	}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("parsed\n%+v\nwant\n%+v", d, want)
	}

	for _, tc := range []struct {
		name, in string
		notAgg   bool
	}{
		{"legacy group list", `{"kind":"APIGroupList","apiVersion":"v1","groups":[]}`, true},
		{"legacy versions", `{"kind":"APIVersions","versions":["v1"]}`, true},
		{"not JSON", `<html>`, false},
		{"wrong types", `{"kind":"APIGroupDiscoveryList","items":{"a":1}}`, false},
	} {
		err := parseAggregated([]byte(tc.in), discovered{})
		if err == nil {
			t.Errorf("%s: no error", tc.name)
		} else if errors.Is(err, errNotAggregated) != tc.notAgg {
			t.Errorf("%s: error %v; want errNotAggregated: %v", tc.name, err, tc.notAgg)
		}
	}
}

func TestParseResourceList(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     servedVersion
		err      bool
	}{
		{"core", `{"kind":"APIResourceList","groupVersion":"v1","resources":[{"name":"pods","namespaced":true},{"name":"pods/log"},{"name":"nodes"}]}`,
			servedVersion{version: "v1", resources: []string{"pods", "nodes"}, clusterScoped: []string{"nodes"}}, false},
		{"group", `{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"networking.istio.io/v1beta1","resources":[{"name":"gateways","namespaced":true}]}`,
			servedVersion{version: "v1beta1", resources: []string{"gateways"}}, false},
		{"no resources", `{"groupVersion":"apps/v1"}`, servedVersion{version: "v1"}, false},
		{"no group version", `{"resources":[{"name":"pods"}]}`, servedVersion{}, true},
		{"bad group version", `{"groupVersion":"a/b/c"}`, servedVersion{}, true},
		{"not JSON", `404 page not found`, servedVersion{}, true},
	} {
		got, err := parseResourceList([]byte(tc.in))
		if (err != nil) != tc.err {
			t.Errorf("%s: error %v, want error: %v", tc.name, err, tc.err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestVersionsFor(t *testing.T) {
	gateways, _ := inventory.LookupKind("gateways")
	pods, _ := inventory.LookupKind("pods")
	apps, _ := inventory.LookupKind("applications")
	for _, tc := range []struct {
		name string
		d    discovered
		want map[schema.GroupResource]string
	}{
		{"the server's preferred version, when the summary knows it",
			discovered{"networking.istio.io": {{"v1beta1", []string{"gateways"}, nil}, {"v1", []string{"gateways"}, nil}}},
			map[schema.GroupResource]string{gateways.Resource(): "v1beta1"}},
		{"otherwise the summary's first that is served",
			discovered{"networking.istio.io": {{"v2", []string{"gateways"}, nil}, {"v1alpha3", []string{"gateways"}, nil}, {"v1", []string{"gateways"}, nil}}},
			map[schema.GroupResource]string{gateways.Resource(): "v1"}},
		{"a version without the resource doesn't count",
			discovered{"networking.istio.io": {{"v1", []string{"virtualservices"}, nil}, {"v1alpha3", []string{"gateways"}, nil}}},
			map[schema.GroupResource]string{gateways.Resource(): "v1alpha3"}},
		{"no version the summary knows",
			discovered{"argoproj.io": {{"v1beta9", []string{"applications"}, nil}}},
			map[schema.GroupResource]string{}},
		{"the resource in another group",
			discovered{"example.com": {{"v1", []string{"pods"}, nil}}},
			map[schema.GroupResource]string{}},
		{"core",
			discovered{"": {{"v1", []string{"pods", "nodes"}, nil}}},
			map[schema.GroupResource]string{pods.Resource(): "v1"}},
		{"nothing", discovered{}, map[schema.GroupResource]string{}},
	} {
		got := versionsFor([]inventory.Kind{gateways, pods, apps}, tc.d)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

// FuzzParseDiscovery feeds the API server's discovery answers (untrusted:
// an aggregated API's server contributes to them) to both parsers and the
// version choice.
func FuzzParseDiscovery(f *testing.F) {
	f.Add([]byte(coreAggregated))
	f.Add([]byte(groupsAggregated))
	f.Add([]byte(`{"kind":"APIResourceList","groupVersion":"apps/v1","resources":[{"name":"deployments"},{"name":"deployments/scale"}]}`))
	f.Add([]byte(`{"kind":"APIGroupList","groups":[]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		d := discovered{}
		if err := parseAggregated(b, d); err != nil && len(d) != 0 {
			t.Fatalf("an error (%v) with a result", err)
		}
		if sv, err := parseResourceList(b); err == nil {
			if sv.version == "" {
				t.Fatal("a resource list without a version")
			}
			d["x"] = append(d["x"], sv)
		}
		for _, vs := range d {
			for _, v := range vs {
				for _, r := range v.resources {
					if r == "" || strings.Contains(r, "/") {
						t.Fatalf("resource %q kept", r)
					}
				}
			}
		}
		for gr, v := range versionsFor(inventory.Kinds, d) {
			k, ok := inventory.LookupKind(gr.Resource)
			if !ok || k.Group != gr.Group {
				t.Fatalf("chose %v, not an inventory kind", gr)
			}
			known := false
			for _, kv := range k.Versions {
				known = known || kv == v
			}
			if !known {
				t.Fatalf("chose %s for %v, a version the summary doesn't know", v, gr)
			}
		}
	})
}

// TestAPIServerIsReachedDirectly: the agent's own requests to its API
// server take no proxy, whatever HTTPS_PROXY says: that is for the
// WebSocket to the hub, and the relay dials the API server directly too.
func TestAPIServerIsReachedDirectly(t *testing.T) {
	ca, err := pki.NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, ca.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := newAPIServer(Config{Host: "https://10.96.0.1:443", CAFile: caFile, TokenFile: filepath.Join(t.TempDir(), "token")})
	if err != nil {
		t.Fatal(err)
	}
	tr := a.client.Transport.(*serviceAccountTransport).tr
	if tr.Proxy != nil {
		u, err := tr.Proxy(&http.Request{URL: &url.URL{Scheme: "https", Host: "10.96.0.1:443"}})
		t.Errorf("the API server client has a proxy function (it gives %v, %v for the API server); it must dial directly", u, err)
	}
}

func TestDecodeList(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		names    []string
		meta     listMeta
		err      bool
	}{
		{"a page", `{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"7","continue":"c"},"items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b"},"status":{"nodes":{"x":{}}}}]}`,
			[]string{"a", "b"}, listMeta{ResourceVersion: "7", Continue: "c"}, false},
		{"items before metadata", `{"items":[{"metadata":{"name":"a"}}],"metadata":{"resourceVersion":"8"}}`, []string{"a"}, listMeta{ResourceVersion: "8"}, false},
		{"no items", `{"metadata":{"resourceVersion":"9"},"items":null}`, nil, listMeta{ResourceVersion: "9"}, false},
		{"a null item", `{"items":[null,{"metadata":{"name":"a"}}]}`, []string{"a"}, listMeta{}, false},
		{"items not a list", `{"items":{"a":1}}`, nil, listMeta{}, true},
		{"an item not an object", `{"items":[1]}`, nil, listMeta{}, true},
		{"cut short", `{"items":[{"metadata":{"name":"a"}},{"meta`, []string{"a"}, listMeta{}, true},
		{"not an object", `[]`, nil, listMeta{}, true},
	} {
		var names []string
		meta, err := decodeList(strings.NewReader(tc.in), func(o map[string]any) {
			name, _ := o["metadata"].(map[string]any)["name"].(string)
			names = append(names, name)
		})
		if (err != nil) != tc.err || !reflect.DeepEqual(names, tc.names) || !tc.err && meta != tc.meta {
			t.Errorf("%s: %v, %+v, %v; want %v, %+v, error %v", tc.name, names, meta, err, tc.names, tc.meta, tc.err)
		}
	}
}

// FuzzDecodeList: whatever an API server (or an aggregated API's server)
// answers a list with, decoding it neither panics nor hands on anything but
// objects.
func FuzzDecodeList(f *testing.F) {
	f.Add(`{"metadata":{"resourceVersion":"7"},"items":[{"metadata":{"name":"a"}}]}`)
	f.Add(`{"items":null}`)
	f.Add(`{"items":[null,1]}`)
	f.Fuzz(func(t *testing.T, in string) {
		decodeList(&atMost{r: strings.NewReader(in), left: 1 << 10}, func(o map[string]any) {
			if o == nil {
				t.Error("a nil object handed on")
			}
		})
	})
}

func TestAtMost(t *testing.T) {
	in := strings.Repeat("x", 100)
	if b, err := io.ReadAll(&atMost{r: strings.NewReader(in), left: 100}); err != nil || len(b) != 100 {
		t.Errorf("100 of 100: %d, %v", len(b), err)
	}
	if _, err := io.ReadAll(&atMost{r: strings.NewReader(in), left: 99}); !errors.Is(err, errAnswerTooLarge) {
		t.Errorf("100 of 99: %v", err)
	}
}
