//go:build perfcheck

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/listfile"
	"github.com/tetherhq/tether/internal/protocol"
	"github.com/tetherhq/tether/internal/testutil/hostileagent"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

// TestPerfHostileInventoryStaysUnderTheChartsLimit (issue 33, item 3): two
// agents whose tokens were stolen each send a snapshot and then a second
// one, never completed, of 700 MB of summaries, as the hub takes them; a
// third cluster sends its own. The real hub, in a process of its own with
// its default settings, stays under the chart's memory limit, at its peak,
// and keeps the third cluster's inventory. (It reached 709 MB of heap with
// one such agent, and would have gone on.) Without -race, which inflates
// memory: `make perf-check`.
func TestPerfHostileInventoryStaysUnderTheChartsLimit(t *testing.T) {
	limit := chartHubMemoryLimit(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	addr, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	token, _ := fleet.NewToken()
	userToken, _ := fleet.NewToken()
	var agents strings.Builder
	for _, n := range []string{"hostile-1", "hostile-2", "good"} {
		fmt.Fprintf(&agents, "- name: %s\n  tokenSha256: %s\n", n, listfile.TokenSHA256(token))
	}
	self, _ := os.Executable()
	env := []string{"TETHER_ADDR=" + addr, "TETHER_PUBLIC_URL=http://" + addr, "TETHER_METRICS_ADDR=0", "TETHER_LOG_FORMAT=text",
		"TETHER_FLEET_AGENTS=" + agents.String(), fmt.Sprintf("TETHER_USERS=- name: bench\n  tokenSha256: %s\n", listfile.TokenSHA256(userToken)),
		"TETHER_AUDIT_FILE=" + filepath.Join(t.TempDir(), "audit")}
	hub, err := startChild(ctx, "hub", []string{self, "child", "hub"}, env, filepath.Join(t.TempDir(), "hub.log"), true)
	if err != nil {
		t.Fatal(err)
	}
	defer hub.stop(20 * time.Second)

	connect := func(name string) (*hostileagent.Agent, *hostileagent.Inventory) {
		a, err := hostileagent.Dial(ctx, hostileagent.Config{HubURL: "http://" + addr, Name: name, Token: token})
		if err != nil {
			t.Fatal(err)
		}
		inv, err := a.OpenInventory(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return a, inv
	}
	peak := int64(0)
	watch := func() {
		peak = max(peak, hub.rss())
	}
	// 900 pods of about 1 KiB of labels each: a frame just under 1 MiB.
	frame := func(first int, snapshot, complete bool) *protocol.Update {
		u := &protocol.Update{Snapshot: snapshot, Complete: complete}
		if snapshot {
			u.Kinds = []protocol.KindState{{Kind: "pods"}}
		}
		for i := first; i < first+900; i++ {
			l := map[string]string{}
			for j := range 8 {
				l[fmt.Sprintf("label-%d", j)] = strings.Repeat("v", 80)
			}
			u.Upserts = append(u.Upserts, protocol.Resource{ResourceRef: protocol.ResourceRef{Kind: "pods", Namespace: "forged", Name: fmt.Sprint("pod-", i)}, Labels: l})
		}
		return u
	}
	const frames = 700 // each about 1 MB on the wire
	errs := make(chan error, 2)
	var hostile []*hostileagent.Agent
	for _, name := range []string{"hostile-1", "hostile-2"} {
		a, inv := connect(name)
		hostile = append(hostile, a)
		go func() {
			for i := range frames {
				// The first 100 frames a complete snapshot, the rest a
				// second one, never completed.
				if err := inv.Send(frame(i*900, i == 0 || i == 100, i == 99)); err != nil {
					errs <- fmt.Errorf("%s: frame %d: %w", name, i, err)
					return
				}
			}
			errs <- nil
		}()
	}
	ga, good := connect("good")
	defer ga.Close()
	for i := range 3 {
		if err := good.Send(frame(i*900, i == 0, i == 2)); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		for waiting := true; waiting; {
			select {
			case err := <-errs:
				if err != nil {
					t.Fatal(err)
				}
				waiting = false
			case <-time.After(100 * time.Millisecond):
				watch() // sampled, besides the peak the kernel keeps
			}
		}
	}
	var s hubStats
	if err := getJSON("http://"+hub.ready[1]+"/stats", &s); err != nil {
		t.Fatal(err)
	}
	watch()
	hwm := peakRSSOf(hub.pid())
	t.Logf("hub after 1.4 GB of hostile inventory: heap %.0f MiB, RSS %.0f MiB, peak RSS %.0f MiB (sampled %.0f MiB); the chart's limit %.0f MiB",
		mib(int64(s.HeapAlloc)), mib(s.RSS), mib(hwm), mib(peak), mib(limit))
	if hwm >= limit || peak >= limit {
		t.Errorf("the hub's RSS peaked at %.0f MiB, past the chart's limit of %.0f MiB", mib(max(hwm, peak)), mib(limit))
	}
	// The third cluster's 2,700 pods, none ready, are all there.
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/api/clusters/good", nil)
	req.Header.Set("Authorization", "Bearer "+userToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var c struct {
		Summary struct {
			PodsNotReady int `json:"podsNotReady"`
		} `json:"summary"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil || c.Summary.PodsNotReady != 2700 {
		t.Errorf("the good cluster: %s, %d pods not ready, %v; want 2700", resp.Status, c.Summary.PodsNotReady, err)
	}
	for _, a := range hostile {
		a.Close()
	}
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// peakRSSOf is the process's peak resident set (VmHWM) in bytes.
func peakRSSOf(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmHWM:") {
			kb, _ := strconv.ParseInt(strings.Fields(l)[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// chartHubMemoryLimit reads hub.resources.limits.memory from the chart's
// values.
func chartHubMemoryLimit(t *testing.T) int64 {
	b, err := os.ReadFile("../charts/tether/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Hub struct {
			Resources struct {
				Limits struct {
					Memory string `json:"memory"`
				} `json:"limits"`
			} `json:"resources"`
		} `json:"hub"`
	}
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	q, err := resource.ParseQuantity(v.Hub.Resources.Limits.Memory)
	if err != nil {
		t.Fatalf("the chart's hub memory limit %q: %v", v.Hub.Resources.Limits.Memory, err)
	}
	return q.Value()
}
