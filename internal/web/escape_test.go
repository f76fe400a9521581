package web

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/a-h/templ"

	"github.com/tetherhq/tether/internal/hub"
	"github.com/tetherhq/tether/internal/recording"
)

// TestPagesEscapeWhatOthersWrote: what a hostile agent, API server, identity
// provider or person can put on a page (an agent's version, a probe's error,
// a cluster's Kubernetes version, a name, a command) is text there, never
// markup, in element text and in attributes alike.
func TestPagesEscapeWhatOthersWrote(t *testing.T) {
	const evil = `"'><script>alert(1)</script><img src=x onerror=alert(2)>`
	now := time.Date(2026, 12, 5, 4, 0, 0, 0, time.UTC)
	c := ClusterJSON{
		Name: "prod", Status: "Unreachable", Message: evil, KubernetesVersion: evil, AgentVersion: evil,
		Labels: map[string]string{"team": evil}, ConnectedSince: &now,
	}
	m := recording.Meta{ID: "abc", Person: evil, Verb: "exec", Namespace: evil, Pod: evil, Container: evil, Command: []string{"sh", "-c", evil}, Time: now}
	for name, page := range map[string]templ.Component{
		"fleet":     fleetPage(fleetData{Base: "/", Person: evil, Clusters: []ClusterJSON{c}, Kinds: []string{evil}}),
		"cluster":   clusterPage(clusterData{"/", evil, c, []hub.StatusChange{{Time: now, Status: evil}}, Connect{Login: evil, Kubectl: evil}}),
		"login":     loginPage(loginData{Base: "/", Error: evil, Next: evil, OIDC: true}),
		"device":    deviceSignInPage(deviceData{Base: "/", Error: evil, Code: evil, Name: evil}),
		"recording": recordingPage(recordingData{"/", evil, "prod", m}),
	} {
		var b bytes.Buffer
		if err := page.Render(t.Context(), &b); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		html := b.String()
		for _, raw := range []string{"<script>alert", "<img", `"'>`} {
			if strings.Contains(html, raw) {
				t.Errorf("the %s page holds %q unescaped", name, raw)
			}
		}
		if !strings.Contains(html, "&lt;script&gt;alert(1)&lt;/script&gt;") {
			t.Errorf("the %s page lacks the escaped text", name)
		}
	}
}

// TestSignInKeepsThePageAskedFor: the identity provider's link carries the
// page to return to as a query value, whatever it holds.
func TestSignInKeepsThePageAskedFor(t *testing.T) {
	d := loginData{Base: "/tether/", Next: "/tether/cluster/prod?x=1&y=2"}
	if got, want := d.oidcURL(), "/tether/login/oidc?next=%2Ftether%2Fcluster%2Fprod%3Fx%3D1%26y%3D2"; got != want {
		t.Errorf("oidcURL: %s, want %s", got, want)
	}
	d.Next = d.Base
	if got, want := d.oidcURL(), "/tether/login/oidc"; got != want {
		t.Errorf("oidcURL back to the fleet: %s, want %s", got, want)
	}
}
