package store

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/protocol"
)

func TestEventsOfAnObject(t *testing.T) {
	ev := func(ns, name, object, reason string, minute int) protocol.Resource {
		r := res("events", ns, name, true, nil)
		r.Object, r.Reason, r.Phase = object, reason, "Warning"
		r.LastSeen = time.Date(2026, 12, 1, 10, minute, 0, 0, time.UTC).Format(time.RFC3339)
		return r
	}
	ups := []protocol.Resource{
		ev("shop", "a1", "Pod/web-1", "BackOff", 1),
		ev("shop", "a2", "Pod/web-1", "BackOff", 9), // the same reason, later: wins
		ev("shop", "a3", "Pod/web-1", "Unhealthy", 5),
		ev("shop", "a4", "Pod/web-2", "BackOff", 7),            // another pod
		ev("other", "a5", "Pod/web-1", "FailedMount", 8),       // another namespace's web-1
		ev("default", "n1", "Node/node-1", "FreeDiskSpace", 3), // a node's, filed in default
	}
	for i := range 8 {
		ups = append(ups, ev("busy", fmt.Sprint("b", i), "Pod/noisy", fmt.Sprint("Reason", i), 10+i))
	}
	s := New(Config{})
	s.Receiver("c").Apply(&protocol.Update{Snapshot: true, Complete: true, Kinds: watched("events"), Upserts: ups}, time.Now())

	names := func(items []Item) []string {
		var out []string
		for _, it := range items {
			out = append(out, it.Namespace+"/"+it.Name)
		}
		return out
	}
	for _, tc := range []struct {
		ns, object string
		allow      Allow
		want       []string
	}{
		{"shop", "Pod/web-1", everyone, []string{"shop/a2", "shop/a3"}},
		{"shop", "Pod/web-2", everyone, []string{"shop/a4"}},
		{"", "Node/node-1", everyone, []string{"default/n1"}},
		{"busy", "Pod/noisy", everyone, []string{"busy/b7", "busy/b6", "busy/b5", "busy/b4", "busy/b3"}},
		{"shop", "Pod/web-1", func(kind, ns string) bool { return kind == "events" && ns != "shop" }, nil},
		{"shop", "Pod/gone", everyone, nil},
	} {
		if got := names(s.Events("c", tc.ns, tc.object, tc.allow)); !slices.Equal(got, tc.want) {
			t.Errorf("events of %s in %q: %v, want %v", tc.object, tc.ns, got, tc.want)
		}
	}
	if got := s.Events("unknown", "shop", "Pod/web-1", everyone); got != nil {
		t.Errorf("an unknown cluster: %v", got)
	}
}

// TestExtraKindsAreKeptWhenTheAgentWatchesThem: a kind of
// TETHER_INVENTORY_KINDS_EXTRA is kept when the agent says it watches it,
// a kind it doesn't name is not, and Secrets never are.
func TestExtraKindsAreKeptWhenTheAgentWatchesThem(t *testing.T) {
	s := New(Config{})
	kinds := append(watched("pods"), protocol.KindState{Kind: "gateways.gateway.networking.k8s.io"}, protocol.KindState{Kind: "secrets"})
	s.Receiver("c").Apply(&protocol.Update{Snapshot: true, Complete: true, Kinds: kinds, Upserts: []protocol.Resource{
		res("gateways.gateway.networking.k8s.io", "edge", "public", true, nil),
		res("certificates.cert-manager.io", "shop", "tls", true, nil),
		res("secrets", "shop", "db", true, nil),
	}}, time.Now())
	for kind, want := range map[string]int{"gateways.gateway.networking.k8s.io": 1, "certificates.cert-manager.io": 0, "secrets": 0} {
		if items, _ := s.Select("c", Query{Kind: kind}, everyone); len(items) != want {
			t.Errorf("%s: %d kept, want %d", kind, len(items), want)
		}
	}
}

// TestAnnouncedKindsAreBounded: an agent that says it watches 100 made-up
// kinds, and sends an object of each, has MaxExtraKinds of them kept.
func TestAnnouncedKindsAreBounded(t *testing.T) {
	var kinds []protocol.KindState
	var ups []protocol.Resource
	for i := range 2 * MaxExtraKinds {
		made := fmt.Sprintf("made-up-%d.example.com", i)
		kinds = append(kinds, protocol.KindState{Kind: made})
		ups = append(ups, res(made, "a", "x", true, nil))
	}
	st := &state{objects: map[string]map[string]*protocol.Resource{}}
	st.apply(&protocol.Update{Kinds: kinds, Upserts: append(ups, res("pods", "a", "web", true, nil))})
	if len(st.objects) != MaxExtraKinds+1 || st.count != MaxExtraKinds+1 {
		t.Errorf("%d kinds, %d objects kept; want %d made-up kinds and pods", len(st.objects), st.count, MaxExtraKinds)
	}
}
