package agent

import (
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/protocol"
)

// fakeAPIServer answers GET /version as an API server of release minor
// would: 200 to the agent's account, and to it impersonating CeilingUser
// when impersonated says so, else the 403 a server without constrained
// impersonation gives. Its access reviews say whether the account has the
// plain impersonate verb: plain.
func fakeAPIServer(t *testing.T, minor string, impersonated int, plain bool) (*httptest.Server, *atomic.Int32) {
	var asked atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		if r.Header.Get("Authorization") != "Bearer sa-token" {
			http.Error(w, "unexpected", http.StatusTeapot)
			return
		}
		if r.Method == http.MethodPost && r.URL.Path == "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews" && r.Header.Get("Impersonate-User") == "" {
			var review struct {
				Spec struct {
					ResourceAttributes struct{ Verb, Group, Resource string }
				}
			}
			if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Spec.ResourceAttributes.Verb != "impersonate" ||
				review.Spec.ResourceAttributes.Resource != "users" || review.Spec.ResourceAttributes.Group != "" {
				t.Errorf("the access review asks %+v, %v", review, err)
			}
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"kind":"SelfSubjectAccessReview","status":{"allowed":%v}}`, plain)
			return
		}
		if r.URL.Path != "/version" {
			http.Error(w, "unexpected", http.StatusTeapot)
			return
		}
		if as := r.Header.Get("Impersonate-User"); as != "" {
			if as != CeilingUser {
				t.Errorf("impersonating %q, want %q", as, CeilingUser)
			}
			if impersonated != http.StatusOK {
				w.WriteHeader(impersonated)
				fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"users \"%s\" is forbidden: User \"system:serviceaccount:tether:tether-agent\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope","reason":"Forbidden","code":%d}`, as, impersonated)
				return
			}
		}
		fmt.Fprintf(w, `{"major":"1","minor":%q,"gitVersion":"v1.%s.2"}`, minor, strings.TrimSuffix(minor, "+"))
	}))
	t.Cleanup(srv.Close)
	return srv, &asked
}

// TestCeilingCheck: under strictMode the agent asks the API server, with a
// real impersonated request, whether constrained impersonation works, and
// words what it finds for the hub.
func TestCeilingCheck(t *testing.T) {
	for _, tt := range []struct {
		name         string
		strict       bool
		minor        string
		impersonated int
		plain        bool
		state, why   string
	}{
		{"no strict mode", false, "36", http.StatusOK, false, protocol.CeilingOff, ""},
		{"1.36 enforces it", true, "36", http.StatusOK, false, protocol.CeilingEnforced, ""},
		{"a later release", true, "40", http.StatusOK, false, protocol.CeilingEnforced, ""},
		// The impersonated request passes with the plain verb too.
		{"the plain verb as well", true, "36", http.StatusOK, true, protocol.CeilingUnavailable,
			"strictMode: the agent's ServiceAccount may impersonate anyone for anything (the plain impersonate verb on users), so no ceiling holds"},
		{"1.33", true, "33", http.StatusForbidden, false, protocol.CeilingUnavailable,
			"strictMode needs constrained impersonation, Kubernetes 1.36 or later; this cluster runs 1.33"},
		{"a provider's 1.35", true, "35+", http.StatusForbidden, false, protocol.CeilingUnavailable,
			"strictMode needs constrained impersonation, Kubernetes 1.36 or later; this cluster runs 1.35"},
		{"1.36, gate off", true, "36", http.StatusForbidden, false, protocol.CeilingUnavailable,
			`strictMode: this cluster (Kubernetes 1.36) refuses constrained impersonation, so it would refuse every request through Tether: turn its ConstrainedImpersonation feature gate on, or grant the agent's ServiceAccount what the chart's strictMode grants. The API server said: users "tether:ceiling-check" is forbidden: User "system:serviceaccount:tether:tether-agent" cannot impersonate resource "users" in API group "" at the cluster scope`},
		{"an answer other than 403", true, "36", http.StatusInternalServerError, false, protocol.CeilingUnavailable,
			"strictMode: the agent can't check that the API server enforces the ceiling (the API server answered 500: "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv, asked := fakeAPIServer(t, tt.minor, tt.impersonated, tt.plain)
			a := ceilingAgent(t, srv, tt.strict)
			got := a.checkCeiling(t.Context(), ServiceAccount{Token: "sa-token", CACert: serverCA(srv)})
			if got.state != tt.state || !strings.HasPrefix(got.why, tt.why) || (tt.why == "") != (got.why == "") {
				t.Errorf("checkCeiling = %+v\nwant %s, %q", got, tt.state, tt.why)
			}
			if !tt.strict && asked.Load() != 0 {
				t.Errorf("without strictMode the agent asked the API server %d times", asked.Load())
			}
			if err := (&protocol.Message{Type: protocol.TypeHello, Protocol: 1, CACert: "c", ServiceAccountToken: "t", APIServer: "a:1",
				Ceiling: got.state, CeilingError: got.why}).Validate(); err != nil {
				t.Errorf("the hello would be refused: %v", err)
			}
		})
	}
}

// TestCeilingCheckUnreachable: an API server the agent can't reach makes
// the ceiling unavailable, saying why, within the check's bound.
func TestCeilingCheckUnreachable(t *testing.T) {
	srv, _ := fakeAPIServer(t, "36", http.StatusOK, false)
	ca := serverCA(srv)
	srv.Close()
	a := ceilingAgent(t, srv, true)
	got := a.checkCeiling(t.Context(), ServiceAccount{Token: "sa-token", CACert: ca})
	if got.state != protocol.CeilingUnavailable || !strings.Contains(got.why, "can't check that the API server enforces the ceiling (dial tcp") ||
		!strings.HasSuffix(got.why, "it tries again every 60 s") {
		t.Errorf("checkCeiling = %+v", got)
	}
}

func ceilingAgent(t *testing.T, srv *httptest.Server, strict bool) *Agent {
	t.Helper()
	a, err := New(Config{Options: Options{
		HubURL:     &url.URL{Scheme: "https", Host: "hub.example.com"},
		APIServer:  strings.TrimPrefix(srv.URL, "https://"),
		StrictMode: strict,
	}, HandshakeTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func serverCA(srv *httptest.Server) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
}
