package kubeproxy

import (
	"net/url"
	"strings"
	"testing"
)

func TestClusterLocation(t *testing.T) {
	api, _ := url.Parse("https://kubernetes.default.svc/api/v1/namespaces/x/services/s:80/proxy/a%2Fb/c")
	direct, _ := url.Parse("https://10.0.0.1:6443/api")
	const cluster = "https://hub.example.com/tether/clusters/eu"
	for _, c := range []struct {
		loc  string
		api  *url.URL
		want string // "" when refused
	}{
		{"https://kubernetes.default.svc/", api, cluster + "/"},
		{"https://kubernetes.default.svc", api, cluster + "/"},
		{"HTTPS://Kubernetes.Default.SVC:443/x?y=1#z", api, cluster + "/x?y=1#z"},
		{"https://user:pass@kubernetes.default.svc/x", api, cluster + "/x"},
		{"/api/v1/x%2Fy", api, cluster + "/api/v1/x%2Fy"},
		{"d", api, cluster + "/api/v1/namespaces/x/services/s:80/proxy/a%2Fb/d"},
		{"./d/", api, cluster + "/api/v1/namespaces/x/services/s:80/proxy/a%2Fb/d/"},
		{"../../../../../../../../../..", api, cluster + "/"},
		{"?q=1", api, cluster + "/api/v1/namespaces/x/services/s:80/proxy/a%2Fb/c?q=1"},
		{"?", api, cluster + "/api/v1/namespaces/x/services/s:80/proxy/a%2Fb/c?"},
		{"#f", api, cluster + "/api/v1/namespaces/x/services/s:80/proxy/a%2Fb/c#f"},
		{"https://10.0.0.1:6443/y", direct, cluster + "/y"},
		{"https://10.0.0.1/y", direct, ""},
		{"https://kubernetes.default.svc/y", direct, ""},
		{"", api, ""},
		{"http://kubernetes.default.svc/", api, ""},
		{"wss://kubernetes.default.svc/", api, ""},
		{"https:kubernetes.default.svc", api, ""},
		{"https:/x", api, ""},
		{"//evil.example/", api, ""},
		{"///evil.example/", api, ""},
		{`/\evil.example`, api, ""},
		{`\\evil.example`, api, ""},
		{"/\tevil", api, ""},
		{" https://kubernetes.default.svc/", api, ""},
		{"https://kubernetes.default.svc/\x00", api, ""},
		{"https://kubernetes.default.svc/ü", api, ""},
		{"https://kubernetes.default.svc@evil.example/", api, ""},
		{"https://evil.example#@kubernetes.default.svc/", api, ""},
		{"https://evil.example\\@kubernetes.default.svc/", api, ""},
		{"https://kubernetes.default.svc./", api, ""},
		{"https://kubernetes.default.svc:/", api, ""},
		{"https://kubernetes.default.svc:8443/", api, ""},
		{"https://[::1]/", api, ""},
		{"/%2e%2e/clusters/other", api, ""},
		{"/a/%2E/b", api, ""},
		{"/a/%zz", api, ""},
		{"mailto:a@kubernetes.default.svc", api, ""},
		{"data:text/html,hi", api, ""},
		{strings.Repeat("/a", maxLocation), api, ""},
	} {
		got, ok := clusterLocation(c.loc, c.api, cluster)
		if got != c.want || ok != (c.want != "") {
			t.Errorf("clusterLocation(%q, %s) = %q, %v; want %q", c.loc, c.api, got, ok, c.want)
		}
	}
}
