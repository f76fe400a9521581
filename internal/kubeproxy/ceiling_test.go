package kubeproxy

import (
	"context"
	"net/http/httptest"
	"net/http/httputil"
	"testing"

	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/protocol"
	"github.com/tetherhq/tether/internal/testutil/upstream"
)

// TestStrictClustersGetADomainPrefixedRequestID: constrained impersonation
// refuses a request with an extra whose key isn't domain-prefixed, so a
// cluster whose ceiling holds gets the request id as
// tetherhq.github.io/request-id, and every other as SPEC's
// tether-request-id (decision 027).
func TestStrictClustersGetADomainPrefixedRequestID(t *testing.T) {
	people, err := auth.New(auth.Config{Users: testUsers})
	if err != nil {
		t.Fatal(err)
	}
	defer people.Close()
	px, err := New(Config{Clusters: oneCluster{}, Auth: people})
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	for _, tc := range []struct {
		ceiling    string
		want, gone string
	}{
		{"", RequestIDHeader, StrictRequestIDHeader},
		{protocol.CeilingOff, RequestIDHeader, StrictRequestIDHeader},
		{protocol.CeilingEnforced, StrictRequestIDHeader, RequestIDHeader},
	} {
		conn := &upstream.Fake{Name: "c", Auth: "Bearer service-account-token", CeilingIs: tc.ceiling}
		in := httptest.NewRequest("GET", "/clusters/c/api", nil)
		in = in.WithContext(context.WithValue(in.Context(), clusterKey{}, route{conn: conn, user: "alice", id: "id-1"}))
		pr := &httputil.ProxyRequest{In: in, Out: in.Clone(in.Context())}
		px.rewrite(pr)
		if got := pr.Out.Header.Get(tc.want); got != "id-1" {
			t.Errorf("ceiling %q: %s = %q, want the request id", tc.ceiling, tc.want, got)
		}
		if got := pr.Out.Header.Values(tc.gone); len(got) != 0 {
			t.Errorf("ceiling %q: %s = %q, want none", tc.ceiling, tc.gone, got)
		}
	}
}
