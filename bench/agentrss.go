package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/tetherhq/tether/internal/localkube"
)

// agentRSSOpts size the agentrss part.
type agentRSSOpts struct {
	bins   []string      // tether binaries to compare; empty: build this tree's
	rounds int           // alternated rounds, each binary once per round
	rest   time.Duration // how long each agent rests before its RSS is read
}

// benchAgentRSS measures only the agent at rest, as the kube part does (the
// same API server, cluster contents, hub and settings), for one or more
// tether binaries taken in turn, the order rotating each round: each agent
// is started, waits until its inventory reached the hub, rests, and has its
// VmRSS read before it is stopped. It reports each binary's median.
func benchAgentRSS(ctx context.Context, r *report, dir string, o agentRSSOpts) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	bins := o.bins
	if len(bins) == 0 {
		bin, err := buildTether(ctx, dir)
		if err != nil {
			return err
		}
		bins = []string{bin}
	}
	cluster, err := localkube.Start(ctx, localkube.Config{TempDir: dir})
	if err != nil {
		return fmt.Errorf("start the API server: %w", err)
	}
	defer cluster.Close()
	bed, err := startHubBed(ctx, dir, cluster)
	if err != nil {
		return err
	}
	defer bed.proc.stop(10 * time.Second)
	hf, hubURL, userToken, agentEnv := bed.files, bed.url, bed.userToken, bed.agentEnv
	api := &http.Client{Transport: &http.Transport{TLSClientConfig: hf.pool}}
	defer api.CloseIdleConnections()
	// inventoryHas reports whether the hub's inventory of the cluster lists
	// the bench's namespace: the agent is connected and its inventory runs.
	inventoryHas := func() bool {
		req, _ := http.NewRequestWithContext(ctx, "GET", hubURL+"/api/clusters/bench/resources?kind=namespaces", nil)
		req.Header.Set("Authorization", "Bearer "+userToken)
		resp, err := api.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == 200 && strings.Contains(string(b), `"`+benchNS+`"`)
	}

	rss := make([][]float64, len(bins))
	for round := range o.rounds {
		for j := range bins {
			i := (round + j) % len(bins)
			logPath := filepath.Join(dir, fmt.Sprintf("agent-%d-%d.log", i, round))
			p, err := startChild(ctx, "agent", []string{bins[i], "agent"}, agentEnv, logPath, false)
			if err != nil {
				return err
			}
			deadline := time.Now().Add(time.Minute)
			for !inventoryHas() {
				if time.Now().After(deadline) || ctx.Err() != nil {
					p.stop(10 * time.Second)
					return fmt.Errorf("%s: the inventory didn't reach the hub in a minute; see %s", bins[i], logPath)
				}
				time.Sleep(200 * time.Millisecond)
			}
			time.Sleep(o.rest)
			v := float64(p.rss()) / (1 << 20)
			parts := statusFields(p.pid(), "RssAnon", "RssFile")
			p.stop(10 * time.Second)
			rss[i] = append(rss[i], v)
			log.Printf("bench: agentrss round %d %s: %.1f MiB (%s)", round, bins[i], v, parts)
		}
	}
	for i, bin := range bins {
		vs := slices.Clone(rss[i])
		slices.Sort(vs)
		r.add(figure{Section: "agentrss", Name: fmt.Sprintf("agent idle RSS (%s, connected, after %s at rest)", filepath.Base(bin), o.rest),
			Value: vs[len(vs)/2], Unit: "MiB", Detail: fmt.Sprintf("median of %d: %.1f", len(vs), rss[i])})
	}
	return nil
}

// statusFields returns the named lines of /proc/pid/status, joined.
func statusFields(pid int, names ...string) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ""
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		for _, n := range names {
			if strings.HasPrefix(l, n+":") {
				out = append(out, strings.Join(strings.Fields(l), " "))
			}
		}
	}
	return strings.Join(out, ", ")
}
