package web

import (
	"fmt"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/hub"
	"github.com/tetherhq/tether/internal/testutil/upstream"
)

// TestAccessCacheBounds: a cluster's answers start over past its own
// bound, and past the bound of all clusters a cluster's new answers are
// not kept; neither drops another cluster's. An answer carried by a
// connection that no longer serves its cluster is not kept.
func TestAccessCacheBounds(t *testing.T) {
	a := newAccessCache(time.Minute, 1)
	now := time.Now()
	conns := map[string]hub.Upstream{}
	for i := range maxAccessEntries/maxClusterAccessEntries + 1 {
		name := fmt.Sprintf("c%02d", i)
		conns[name] = &upstream.Fake{}
		a.connected(name, conns[name])
	}
	key := func(i int) accessKey { return accessKey{person: "alice", kind: "pods", namespace: fmt.Sprint(i)} }
	a.put("c00", conns["c00"], key(-1), true, now)
	// c01 fills its share twice over: its own start over, c00's stay.
	for i := range 2 * maxClusterAccessEntries {
		a.put("c01", conns["c01"], key(i), true, now)
	}
	if _, ok := a.get("c00", conns["c00"], key(-1), now); !ok {
		t.Fatal("c01's answers dropped c00's")
	}
	// Every cluster fills its share: the last finds no room.
	for i := 1; i < len(conns); i++ {
		name := fmt.Sprintf("c%02d", i)
		for j := range maxClusterAccessEntries {
			a.put(name, conns[name], key(j), true, now)
		}
	}
	if _, ok := a.get("c00", conns["c00"], key(-1), now); !ok {
		t.Error("answers of other clusters dropped c00's")
	}
	if a.entries > maxAccessEntries {
		t.Errorf("%d answers kept, over %d", a.entries, maxAccessEntries)
	}
	// Once they expire, there is room again.
	later := now.Add(2 * time.Minute)
	a.put("c10", conns["c10"], key(-1), true, later)
	if _, ok := a.get("c10", conns["c10"], key(-1), later); !ok {
		t.Error("no room after every answer expired")
	}

	old, next := conns["c00"], &upstream.Fake{}
	a.connected("c00", next)
	if _, ok := a.get("c00", next, key(-1), now); ok {
		t.Error("the connection before's answer kept for the next")
	}
	a.put("c00", old, key(-2), true, now)
	if _, ok := a.get("c00", next, key(-2), now); ok {
		t.Error("an answer carried by the connection before, arriving late, kept")
	}
	a.disconnected("c00", old) // not c00's connection: changes nothing
	a.put("c00", next, key(-3), true, now)
	if _, ok := a.get("c00", next, key(-3), now); !ok {
		t.Error("the current connection's answer not kept")
	}
}

// TestDefaults: the answers about what people may list are kept SPEC's 60 s.
func TestDefaults(t *testing.T) {
	wb := New(Config{})
	for _, d := range []struct {
		name      string
		got, want time.Duration
	}{
		{"AccessTTL", wb.cfg.AccessTTL, 60 * time.Second},
		{"the permission cache's lifetime", wb.access.ttl, 60 * time.Second},
	} {
		if d.got != d.want {
			t.Errorf("%s = %s, want %s", d.name, d.got, d.want)
		}
	}
}
