//go:build perfcheck

package store

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/protocol"
)

// TestPerfAccountedBytesMatchTheHeap: what the store counts of an
// inventory is within 20 % of what the heap grows by when the hub takes
// it in, for summaries as a cluster has them and for an agent's worst
// (issue 33: the first count undercounted about twofold). Without -race,
// which changes every allocation: `make perf-check` runs it.
func TestPerfAccountedBytesMatchTheHeap(t *testing.T) {
	const target = 48 << 20 // accounted bytes per shape: enough to dwarf the heap's noise
	pad := func(s string, n int) string { return s + strings.Repeat("x", max(n-len(s), 0)) }
	shapes := []struct {
		name string
		make func(i int) protocol.Resource
	}{
		{"pods as a cluster has them", func(i int) protocol.Resource {
			return protocol.Resource{
				ResourceRef: protocol.ResourceRef{Kind: "pods", Namespace: fmt.Sprintf("team-%d", i%200), Name: fmt.Sprintf("web-7d4f9c8b5-%05d", i)},
				Labels:      map[string]string{"app": "web", "pod-template-hash": "7d4f9c8b5", "app.kubernetes.io/version": "1.4.2", "team": fmt.Sprintf("team-%d", i%200)},
				Owner:       "ReplicaSet/web-7d4f9c8b5", Phase: "Running", Ready: true, Restarts: 2,
				Images: []string{"registry.example.com/shop/web:1.4.2", "istio/proxyv2:1.24.1"},
			}
		}},
		{"bare names", func(i int) protocol.Resource {
			return protocol.Resource{ResourceRef: protocol.ResourceRef{Kind: "pods", Name: fmt.Sprint(i)}}
		}},
		{"many small labels", func(i int) protocol.Resource {
			l := map[string]string{}
			for j := range 40 {
				l[fmt.Sprintf("l%d", j)] = fmt.Sprint(i)
			}
			return protocol.Resource{ResourceRef: protocol.ResourceRef{Kind: "deployments", Namespace: "a", Name: fmt.Sprint(i)}, Labels: l}
		}},
		{"one huge label", func(i int) protocol.Resource {
			return protocol.Resource{ResourceRef: protocol.ResourceRef{Kind: "nodes", Name: fmt.Sprint(i)}, Labels: map[string]string{"x": pad(fmt.Sprint(i), 200<<10)}}
		}},
		{"long conditions", func(i int) protocol.Resource {
			var cs []protocol.Condition
			for j := range 6 {
				cs = append(cs, protocol.Condition{Type: fmt.Sprint("Cond", j), Status: "False", Reason: "Failing", Message: pad(fmt.Sprint(i), 256)})
			}
			return protocol.Resource{ResourceRef: protocol.ResourceRef{Kind: "applications", Namespace: "argocd", Name: fmt.Sprint(i)}, Conditions: cs}
		}},
		{"gateways of many hosts", func(i int) protocol.Resource {
			var hs []string
			for j := range 100 {
				hs = append(hs, fmt.Sprintf("h%d-%d.example.com", j, i))
			}
			return protocol.Resource{ResourceRef: protocol.ResourceRef{Kind: "gateways", Namespace: "istio", Name: fmt.Sprint(i)}, Hosts: hs}
		}},
		{"maximal names", func(i int) protocol.Resource {
			return protocol.Resource{ResourceRef: protocol.ResourceRef{Kind: "services", Namespace: pad(fmt.Sprint(i), 4000), Name: pad(fmt.Sprint(i), 4000)}}
		}},
	}
	for _, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			s := New(Config{MaxBytes: 1 << 30, ClusterMaxBytes: 1 << 30})
			r := s.Receiver("c")
			before := heap()
			r.Apply(&protocol.Update{Snapshot: true, Kinds: watched("pods", "deployments", "nodes", "applications", "gateways", "services")}, time.Now())
			for i := 0; s.Bytes() < target; {
				var u protocol.Update
				size := 0
				for ; len(u.Upserts) < 500 && size < 800<<10; i++ {
					res := sh.make(i)
					u.Upserts = append(u.Upserts, res)
					size += resourceSize(&res)
				}
				// As the hub gets it: decoded from the frame's JSON.
				b, err := json.Marshal(&u)
				if err != nil {
					t.Fatal(err)
				}
				got, err := protocol.DecodeUpdate(b)
				if err != nil {
					t.Fatal(err)
				}
				r.Apply(got, time.Now())
			}
			r.Apply(&protocol.Update{Complete: true}, time.Now())
			grew := heap() - before
			counted := s.Bytes()
			ratio := float64(counted) / float64(grew)
			t.Logf("%s: counted %.1f MiB, heap grew %.1f MiB: %.2f", sh.name, mb(counted), mb(grew), ratio)
			if ratio < 0.8 || ratio > 1.2 {
				t.Errorf("%s: counted %.1f MiB, but the heap grew %.1f MiB (%.2f); want within 20 %%", sh.name, mb(counted), mb(grew), ratio)
			}
			runtime.KeepAlive(s)
		})
	}
}

func heap() int {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int(m.HeapAlloc)
}

func mb(n int) float64 { return float64(n) / (1 << 20) }
