package web

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/login"
)

// TestConnectCommands: the cluster page's commands name the hub as people
// open it, and the context as `tether login` and /api/kubeconfig name it.
func TestConnectCommands(t *testing.T) {
	for _, c := range []struct{ url, cluster, login, kubectl string }{
		{"https://tether.example.com", "prod", "tether login --hub https://tether.example.com", "kubectl --context tether.example.com/prod get ns"},
		{"https://tether.example.com/", "prod", "tether login --hub https://tether.example.com", "kubectl --context tether.example.com/prod get ns"},
		{"https://hub.internal:8443/k8s", "shop-eu", "tether login --hub https://hub.internal:8443/k8s", "kubectl --context hub.internal:8443/k8s/shop-eu get ns"},
		{"https://tether.example.com:443", "a", "tether login --hub https://tether.example.com:443", "kubectl --context tether.example.com/a get ns"},
		{"https://h.example/it's", "a", `tether login --hub 'https://h.example/it'\''s'`, `kubectl --context 'h.example/it'\''s/a' get ns`},
	} {
		got := connectCommands(c.url, c.cluster)
		if got.Login != c.login || got.Kubectl != c.kubectl {
			t.Errorf("%s, %s: %q and %q, want %q and %q", c.url, c.cluster, got.Login, got.Kubectl, c.login, c.kubectl)
		}
		if want := (login.Names{Prefix: login.Prefix(c.url)}).Context(c.cluster); !strings.Contains(got.Kubectl, want) && c.url != "https://h.example/it's" {
			t.Errorf("%q doesn't name the context %q", got.Kubectl, want)
		}
	}
}

// TestClusterPageShowsConnectAndTimeline: the cluster page renders its
// Connect panel's commands and its timeline's data, and a card its small
// timeline.
func TestClusterPageShowsConnectAndTimeline(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	c := ClusterJSON{Name: "prod", Status: "Ready", Timeline: &TimelineJSON{Since: now, Now: now, Changes: []TimelineChange{{Time: now, Ready: true}}}}
	var b bytes.Buffer
	err := clusterPage(clusterData{"/", "alice", c, nil, connectCommands("https://tether.example.com", "prod")}).Render(t.Context(), &b)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`<code id="connect-login">tether login --hub https://tether.example.com</code>`,
		`<code id="connect-kubectl">kubectl --context tether.example.com/prod get ns</code>`,
		`id="timeline" class="timeline full" data-timeline="{&#34;since&#34;:&#34;2026-12-04T12:00:00Z&#34;`,
		`static/timeline.js`,
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the cluster page lacks %s", want)
		}
	}
	b.Reset()
	if err := card(c).Render(t.Context(), &b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `class="timeline small" data-timeline="{&#34;since&#34;`) {
		t.Errorf("the card lacks its timeline: %s", b.String())
	}
}
