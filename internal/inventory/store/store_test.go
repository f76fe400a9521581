package store

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/protocol"
	"k8s.io/apimachinery/pkg/labels"
)

func res(kind, ns, name string, ready bool, lbl map[string]string) protocol.Resource {
	return protocol.Resource{ResourceRef: protocol.ResourceRef{Kind: kind, Namespace: ns, Name: name}, Ready: ready, Labels: lbl}
}

func watched(kinds ...string) []protocol.KindState {
	var out []protocol.KindState
	for _, k := range kinds {
		out = append(out, protocol.KindState{Kind: k})
	}
	return out
}

func everyone(string, string) bool { return true }

func selectNames(t *testing.T, s *Store, cluster string, q Query, allow Allow) string {
	t.Helper()
	items, ok := s.Select(cluster, q, allow)
	if !ok {
		t.Fatalf("no inventory for %s", cluster)
	}
	var out []string
	for _, it := range items {
		if it.Cluster != cluster {
			t.Errorf("item %s has cluster %q", it.Name, it.Cluster)
		}
		out = append(out, it.Namespace+"/"+it.Name)
	}
	return strings.Join(out, " ")
}

func TestSnapshotReplacesStateOnlyWhenComplete(t *testing.T) {
	s := New(Config{})
	now := time.Now()
	r := s.Receiver("c")
	r.Apply(&protocol.Update{Snapshot: true, Kinds: watched("pods"), Upserts: []protocol.Resource{res("pods", "a", "ghost", true, nil)}, Complete: true}, now)
	// A new connection's snapshot arrives in two parts; until the last,
	// the old state stands.
	r2 := s.Receiver("c")
	if r2.Apply(&protocol.Update{Snapshot: true, Kinds: watched("pods"), Upserts: []protocol.Resource{res("pods", "a", "one", true, nil)}}, now) {
		t.Error("an incomplete snapshot changed the store")
	}
	if got := selectNames(t, s, "c", Query{Kind: "pods"}, everyone); got != "a/ghost" {
		t.Errorf("during a snapshot: %q", got)
	}
	if !r2.Apply(&protocol.Update{Upserts: []protocol.Resource{res("pods", "b", "two", false, nil)}, Complete: true}, now) {
		t.Error("a complete snapshot didn't change the store")
	}
	if got := selectNames(t, s, "c", Query{Kind: "pods"}, everyone); got != "a/one b/two" {
		t.Errorf("after the snapshot: %q, want the ghost gone", got)
	}
	// Then changes.
	r2.Apply(&protocol.Update{Deletes: []protocol.ResourceRef{{Kind: "pods", Namespace: "a", Name: "one"}}, Upserts: []protocol.Resource{res("pods", "b", "three", true, nil)}}, now)
	if got := selectNames(t, s, "c", Query{Kind: "pods"}, everyone); got != "b/three b/two" {
		t.Errorf("after changes: %q", got)
	}
	// Changes from a receiver that never completed a snapshot are ignored.
	r3 := s.Receiver("c")
	if r3.Apply(&protocol.Update{Deletes: []protocol.ResourceRef{{Kind: "pods", Namespace: "b", Name: "two"}}}, now) {
		t.Error("a change before any snapshot was applied")
	}
	s.Forget("c")
	if _, ok := s.Info("c"); ok {
		t.Error("Forget kept the cluster")
	}
}

func TestSelect(t *testing.T) {
	s := New(Config{})
	s.Receiver("c").Apply(&protocol.Update{Snapshot: true, Complete: true, Kinds: watched("pods", "nodes"), Upserts: []protocol.Resource{
		res("pods", "team-a", "web-1", true, map[string]string{"app": "web", "tier": "front"}),
		res("pods", "team-a", "web-2", false, map[string]string{"app": "web"}),
		res("pods", "team-b", "db-0", false, map[string]string{"app": "db"}),
		res("nodes", "", "node-1", true, nil),
	}}, time.Now())
	f, tr := false, true
	sel := func(s string) labels.Selector {
		l, err := labels.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	onlyA := func(kind, ns string) bool { return ns == "team-a" }
	for _, tc := range []struct {
		name  string
		q     Query
		allow Allow
		want  string
	}{
		{"kind", Query{Kind: "pods"}, everyone, "team-a/web-1 team-a/web-2 team-b/db-0"},
		{"cluster-scoped", Query{Kind: "nodes"}, everyone, "/node-1"},
		{"namespace", Query{Kind: "pods", Namespace: "team-b"}, everyone, "team-b/db-0"},
		{"not ready", Query{Kind: "pods", Ready: &f}, everyone, "team-a/web-2 team-b/db-0"},
		{"ready", Query{Kind: "pods", Ready: &tr}, everyone, "team-a/web-1"},
		{"selector", Query{Kind: "pods", Selector: sel("app=web,tier!=front")}, everyone, "team-a/web-2"},
		{"set selector", Query{Kind: "pods", Selector: sel("app in (db)")}, everyone, "team-b/db-0"},
		{"RBAC", Query{Kind: "pods"}, onlyA, "team-a/web-1 team-a/web-2"},
		{"nothing allowed", Query{Kind: "pods"}, func(string, string) bool { return false }, ""},
		{"unknown kind", Query{Kind: "secrets"}, everyone, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := selectNames(t, s, "c", tc.q, tc.allow); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
	asked := map[string]int{}
	s.Select("c", Query{Kind: "pods"}, func(kind, ns string) bool { asked[ns]++; return true })
	if asked["team-a"] != 1 || asked["team-b"] != 1 {
		t.Errorf("allow asked %v; want once per namespace", asked)
	}
	if _, ok := s.Select("other", Query{Kind: "pods"}, everyone); ok {
		t.Error("a cluster with no inventory answered")
	}
}

func TestSummary(t *testing.T) {
	s := New(Config{})
	app := func(name, sync, health string) protocol.Resource {
		r := res("applications", "argocd", name, sync == "Synced" && health == "Healthy", nil)
		r.Sync, r.Health = sync, health
		return r
	}
	s.Receiver("c").Apply(&protocol.Update{Snapshot: true, Complete: true,
		Kinds: append(watched("nodes", "pods", "applications"), protocol.KindState{Kind: "gateways", Missing: true, Error: "not served"}),
		Upserts: []protocol.Resource{
			res("nodes", "", "n1", true, nil), res("nodes", "", "n2", false, nil), res("nodes", "", "n3", true, nil),
			res("pods", "a", "p1", false, nil), res("pods", "a", "p2", true, nil),
			app("ok", "Synced", "Healthy"), app("drift", "OutOfSync", "Healthy"), app("sick", "Synced", "Degraded"), app("slow", "Synced", "Progressing"), app("gone", "Synced", "Missing"),
		}}, time.Now())
	info, ok := s.Info("c")
	if !ok {
		t.Fatal("no info")
	}
	got := info.Summary
	if *got.NodesReady != 2 || *got.NodesTotal != 3 || *got.PodsNotReady != 1 || *got.AppsOutOfSync != 3 {
		t.Errorf("summary: nodes %d/%d, pods not ready %d, apps out of sync %d; want 2/3, 1, 3", *got.NodesReady, *got.NodesTotal, *got.PodsNotReady, *got.AppsOutOfSync)
	}
	// Counted once per change: a change is counted, and what a caller
	// does with its numbers changes nobody else's.
	*got.PodsNotReady = 99
	c := s.Receiver("c")
	c.committed = s.clusters["c"]
	c.Apply(&protocol.Update{Upserts: []protocol.Resource{res("pods", "a", "p3", false, nil)}}, time.Now())
	if info, _ := s.Info("c"); *info.Summary.PodsNotReady != 2 || *info.Summary.NodesTotal != 3 {
		t.Errorf("after a pod not ready more: %d pods not ready, %d nodes; want 2, 3", *info.Summary.PodsNotReady, *info.Summary.NodesTotal)
	}
	// A kind the agent doesn't watch has no count, not zero.
	s.Receiver("d").Apply(&protocol.Update{Snapshot: true, Complete: true, Kinds: append(watched("pods"), protocol.KindState{Kind: "nodes", Error: "forbidden"})}, time.Now())
	info, _ = s.Info("d")
	if info.Summary.NodesTotal != nil || info.Summary.AppsOutOfSync != nil || info.Summary.PodsNotReady == nil || *info.Summary.PodsNotReady != 0 {
		t.Errorf("summary without nodes or applications: %+v", info.Summary)
	}
}

func TestGateway(t *testing.T) {
	gw := func(ns, name string, hosts ...string) protocol.Resource {
		r := res("gateways", ns, name, true, nil)
		r.Hosts = hosts
		return r
	}
	load := func(tieBreaker string) *Store {
		s := New(Config{})
		s.Receiver("c").Apply(&protocol.Update{Snapshot: true, Complete: true, GatewayTieBreaker: tieBreaker, Kinds: watched("gateways"), Upserts: []protocol.Resource{
			gw("istio-system", "exact", "example.domain1.com"),
			gw("istio-system", "wild", "*.domain1.com"),
			gw("shop", "shop", "shop.domain2.com", "www.shop.domain2.com"),
			gw("edge", "catchall", "*.domain3.com", "*.domain1.com"),
		}}, time.Now())
		return s
	}
	s := load("")
	for host, want := range map[string]string{
		"shop.domain2.com":     "shop/shop",
		"WWW.Shop.domain2.com": "shop/shop",
		"x.domain3.com":        "edge/catchall",
	} {
		got, _, err := s.Gateway("c", host, everyone)
		if err != nil || got != want {
			t.Errorf("%s: %q, %v; want %s", host, got, err, want)
		}
	}
	// Exact and wildcard count alike: without a tie-breaker, an error that
	// names them all; a deeper name matches a wildcard too.
	_, cands, err := s.Gateway("c", "example.domain1.com", everyone)
	var amb *AmbiguousError
	if !errors.As(err, &amb) || !strings.Contains(err.Error(), "istio-system/exact") || !strings.Contains(err.Error(), "istio-system/wild") || len(cands) != 3 {
		t.Errorf("ambiguous host: %v, candidates %v", err, cands)
	}
	_, cands, err = s.Gateway("c", "a.b.domain1.com", everyone)
	if !errors.As(err, &amb) || strings.Join(cands, " ") != "edge/catchall istio-system/wild" {
		t.Errorf("ambiguous host: %v, candidates %v", err, cands)
	}
	// The tie-breaker decides.
	got, _, err := load("istio-system/wild").Gateway("c", "example.domain1.com", everyone)
	if err != nil || got != "istio-system/wild" {
		t.Errorf("with a tie-breaker: %q, %v", got, err)
	}
	// A tie-breaker that is none of the candidates decides nothing.
	_, _, err = load("shop/shop").Gateway("c", "example.domain1.com", everyone)
	if !errors.As(err, &amb) || !strings.Contains(err.Error(), "tie-breaker shop/shop is none of them") {
		t.Errorf("with an unrelated tie-breaker: %v", err)
	}
	// The answer is decided over every gateway, and shown only to those
	// who may list it; the candidates named are those they may list.
	onlyIstio := func(kind, ns string) bool { return ns == "istio-system" && kind == "gateways" }
	onlyEdge := func(kind, ns string) bool { return ns == "edge" }
	got, _, err = s.Gateway("c", "example.domain1.com", onlyIstio)
	if !errors.As(err, &amb) || got != "" || strings.Join(amb.Candidates, " ") != "istio-system/exact istio-system/wild" || amb.Hidden != 1 ||
		!strings.HasPrefix(err.Error(), `3 gateways serve "example.domain1.com": istio-system/exact, istio-system/wild and 1 you may not list`) {
		t.Errorf("two visible of three: %q, %v", got, err)
	}
	got, _, err = s.Gateway("c", "example.domain1.com", onlyEdge)
	if !errors.As(err, &amb) || got != "" || strings.Join(amb.Candidates, " ") != "edge/catchall" || amb.Hidden != 2 {
		t.Errorf("one visible of three, none deciding: %q, %v; want still ambiguous, not edge's", got, err)
	}
	if got, _, err := load("istio-system/wild").Gateway("c", "example.domain1.com", onlyEdge); !errors.Is(err, ErrHiddenGateway) || got != "" {
		t.Errorf("the tie-breaker hidden: %q, %v; want the answer hidden, not the loser edge/catchall", got, err)
	}
	if got, _, err := load("edge/catchall").Gateway("c", "example.domain1.com", onlyEdge); err != nil || got != "edge/catchall" {
		t.Errorf("the tie-breaker visible: %q, %v", got, err)
	}
	if got, _, err := s.Gateway("c", "shop.domain2.com", onlyEdge); !errors.Is(err, ErrHiddenGateway) || got != "" {
		t.Errorf("the one gateway hidden: %q, %v", got, err)
	}
	if _, _, err := s.Gateway("c", "anything.example", everyone); !errors.Is(err, ErrNoGateway) {
		t.Errorf("a host no gateway serves: %v", err)
	}
	if _, _, err := s.Gateway("c", "nothing.here", func(string, string) bool { return false }); !errors.Is(err, ErrNoGateway) {
		t.Errorf("no gateway: %v", err)
	}
}

func TestObjectsPerClusterAreBounded(t *testing.T) {
	st := &state{objects: map[string]map[string]*protocol.Resource{}, count: MaxObjects - 1}
	st.apply(&protocol.Update{Upserts: []protocol.Resource{res("pods", "a", "one", true, nil), res("pods", "a", "two", true, nil)}})
	if st.count != MaxObjects || !st.truncated || len(st.objects["pods"]) != 1 {
		t.Fatalf("count %d, truncated %v, pods %d; want the second left out", st.count, st.truncated, len(st.objects["pods"]))
	}
	// A change to a kept object still applies; a delete makes room.
	st.apply(&protocol.Update{Upserts: []protocol.Resource{res("pods", "a", "one", false, nil)}, Deletes: []protocol.ResourceRef{{Kind: "pods", Namespace: "a", Name: "one"}, {Kind: "pods", Namespace: "a", Name: "never"}}})
	if st.count != MaxObjects-1 {
		t.Errorf("count after a delete: %d", st.count)
	}
}

// TestLateUpdatesOfAnEndedConnectionChangeNothing: a snapshot that
// completes after its cluster was forgotten (removed from the agents list
// while its agent was still sending) doesn't bring the cluster back, and a
// connection taken over changes nothing more while the state it left stays
// until the new connection's snapshot replaces it.
func TestLateUpdatesOfAnEndedConnectionChangeNothing(t *testing.T) {
	s := New(Config{})
	snapshot := func(names ...string) *protocol.Update {
		u := &protocol.Update{Snapshot: true, Complete: true, Kinds: watched("pods")}
		for _, n := range names {
			u.Upserts = append(u.Upserts, res("pods", "a", n, true, nil))
		}
		return u
	}
	removed := s.Receiver("gone")
	removed.Apply(&protocol.Update{Snapshot: true, Kinds: watched("pods")}, time.Now())
	s.Forget("gone")
	if removed.Apply(&protocol.Update{Complete: true, Upserts: []protocol.Resource{res("pods", "a", "x", true, nil)}}, time.Now()) {
		t.Error("a snapshot completed after Forget changed the store")
	}
	if _, ok := s.Info("gone"); ok {
		t.Error("a forgotten cluster came back")
	}

	old := s.Receiver("c")
	old.Apply(snapshot("one"), time.Now())
	s.End("c")
	if old.Apply(&protocol.Update{Upserts: []protocol.Resource{res("pods", "a", "late", true, nil)}}, time.Now()) ||
		old.Apply(snapshot("stale"), time.Now()) {
		t.Error("the connection taken over still changed the store")
	}
	if got := s.clusters["c"].objects["pods"]; len(got) != 1 || got[key("a", "one")] == nil {
		t.Errorf("after the takeover, before the new snapshot: %v; want what the old connection left", got)
	}
	if !s.Receiver("c").Apply(snapshot("two"), time.Now()) || s.clusters["c"].objects["pods"][key("a", "two")] == nil {
		t.Error("the new connection's snapshot didn't replace the state")
	}
}

// TestOnlyKnownKindsAreKept: the kinds an agent names cost the hub memory
// that MaxObjects and DefaultClusterMaxBytes don't count, so only the kinds a query can
// ask for are kept, and a kind whose last object goes is dropped.
func TestOnlyKnownKindsAreKept(t *testing.T) {
	st := &state{objects: map[string]map[string]*protocol.Resource{}}
	for i := range 100 {
		made := fmt.Sprintf("made-up-%d-%s", i, strings.Repeat("k", 4000))
		st.apply(&protocol.Update{Upserts: []protocol.Resource{res(made, "a", "x", true, nil), res("pods", "a", "web", true, nil)}})
	}
	if len(st.objects) != 1 || st.count != 1 {
		t.Fatalf("%d kinds, %d objects kept; want pods alone, one", len(st.objects), st.count)
	}
	st.apply(&protocol.Update{Deletes: []protocol.ResourceRef{{Kind: "pods", Namespace: "a", Name: "web"}}})
	if len(st.objects) != 0 || st.count != 0 || st.bytes != 0 {
		t.Errorf("after the last pod went: %d kinds, %d objects, %d bytes; want none", len(st.objects), st.count, st.bytes)
	}
}

// TestBytesPerClusterAreBounded: an agent can't make the hub hold more than
// DefaultClusterMaxBytes of one cluster's summaries, however large each one is made (a
// label of nearly the message's 1 MiB): past it, new objects are left out,
// a kept one keeps its last summary rather than grow, and the state says
// so. Deletes make room; a change that shrinks an object always applies.
func TestBytesPerClusterAreBounded(t *testing.T) {
	const limit = 8 << 20 // DefaultClusterMaxBytes, scaled down for the test's memory
	st := &state{objects: map[string]map[string]*protocol.Resource{}, maxBytes: limit}
	huge := func(name string) protocol.Resource {
		return res("pods", "a", name, true, map[string]string{"x": strings.Repeat("x", 1000<<10)})
	}
	for i := range limit/(1000<<10) + 10 {
		st.apply(&protocol.Update{Upserts: []protocol.Resource{huge(fmt.Sprint(i))}})
	}
	if st.bytes > limit || !st.truncated || st.count >= limit/(1000<<10)+10 {
		t.Fatalf("%d bytes in %d objects, truncated %v; want at most %d", st.bytes, st.count, st.truncated, limit)
	}
	kept := st.count
	small := res("pods", "a", "0", true, nil)
	st.apply(&protocol.Update{Upserts: []protocol.Resource{small}, Deletes: []protocol.ResourceRef{{Kind: "pods", Namespace: "a", Name: "1"}}})
	if st.objects["pods"][key("a", "0")].Labels != nil || st.count != kept-1 {
		t.Errorf("a shrinking change and a delete: labels %v, %d objects", st.objects["pods"][key("a", "0")].Labels, st.count)
	}
	want := 0
	for _, byKey := range st.objects {
		for _, r := range byKey {
			want += resourceSize(r)
		}
	}
	if st.bytes != want {
		t.Errorf("counted %d bytes, the objects have %d", st.bytes, want)
	}
	// Room again: a new object fits.
	st.apply(&protocol.Update{Upserts: []protocol.Resource{huge("new")}})
	if st.objects["pods"][key("a", "new")] == nil {
		t.Error("no room made by the delete and the shrink")
	}
}

func TestDomains(t *testing.T) {
	gw := func(ns, name string, hosts ...string) protocol.Resource {
		r := res("gateways", ns, name, true, nil)
		r.Hosts = hosts
		return r
	}
	load := func(tieBreaker string) *Store {
		s := New(Config{})
		s.Receiver("c").Apply(&protocol.Update{Snapshot: true, Complete: true, GatewayTieBreaker: tieBreaker, Kinds: watched("gateways"), Upserts: []protocol.Resource{
			gw("istio-system", "exact", "example.domain1.com"),
			gw("istio-system", "wild", "*.domain1.com"),
			gw("shop", "shop", "shop.domain2.com", "Shop.Domain2.com."),
			gw("edge", "catchall", "*.domain3.com"),
		}}, time.Now())
		return s
	}
	show := func(ds []Domain) []string {
		var out []string
		for _, d := range ds {
			s := d.Host + "=" + d.Gateway
			if d.Conflict != "" {
				s += "!" + strings.Join(d.Candidates, ",")
			}
			out = append(out, s)
		}
		return out
	}
	for _, tc := range []struct {
		name, tieBreaker string
		allow            Allow
		want             []string
	}{
		{"no tie-breaker", "", everyone, []string{
			"*.domain1.com=istio-system/wild", "*.domain3.com=edge/catchall",
			"example.domain1.com=!istio-system/exact,istio-system/wild", "shop.domain2.com=shop/shop"}},
		{"the tie-breaker decides", "istio-system/exact", everyone, []string{
			"*.domain1.com=istio-system/wild", "*.domain3.com=edge/catchall",
			"example.domain1.com=istio-system/exact", "shop.domain2.com=shop/shop"}},
		{"only what the person may list", "istio-system/exact", func(_, ns string) bool { return ns == "shop" }, []string{"shop.domain2.com=shop/shop"}},
	} {
		if got := show(load(tc.tieBreaker).Domains("c", tc.allow)); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %q\nwant %q", tc.name, got, tc.want)
		}
	}
	if got := load("").Domains("none", everyone); got != nil {
		t.Errorf("an unknown cluster: %v", got)
	}
}
