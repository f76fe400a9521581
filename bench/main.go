// Command bench measures Tether side by side with direct connections on this
// machine and writes docs/PERFORMANCE.md and bench/results.json (`make bench`
// runs it from the repository's root). Every figure is a ratio or an added
// time against a baseline measured in the same run, with the two runs
// alternated, and medians reported: the machine is shared and noisy.
//
// Hubs, agents and relays run as separate processes (this binary run again
// as "bench child <role>", calling Tether's own packages, or the tether
// binary itself), so each one's CPU time and memory are read from /proc.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) > 2 && os.Args[1] == "child" {
		os.Exit(runChild(os.Args[2], os.Args[3:]))
	}
	var (
		only    = flag.String("only", "tunnel,kube,fleet,probes,replicas", "the parts to run, comma-separated: tunnel, kube, fleet, probes, replicas, and agentrss (not run by default)")
		md      = flag.String("md", "docs/PERFORMANCE.md", "where the report goes")
		js      = flag.String("json", "bench/results.json", "where the figures go as JSON")
		rounds  = flag.Int("rounds", 5, "alternated rounds of each throughput case")
		fleetN  = flag.Int("fleet", 10000, "the largest idle fleet")
		workDir = flag.String("dir", "", "where logs and files go; empty: a new temporary directory")
		agents  = flag.String("agents", "", "agentrss: tether binaries to compare, comma-separated; empty: this tree's")
		perHub  = flag.Int("replica-agents", 2000, "replicas: simulated agents on each of the 3 replicas (15,000 in all is 5000)")
		keep    = flag.Bool("keep", false, "keep the figures of the parts not run from the JSON file, and write the report with them")
	)
	short := flag.Bool("short", false, "the perf-check's short counts, to try the bench itself: the figures are noisier than the full run's")
	rewrite := flag.Bool("rewrite", false, "only write the report again from the JSON file's figures")
	flag.Parse()
	if *rewrite {
		b, err := os.ReadFile(*js)
		if err != nil {
			log.Fatal(err)
		}
		var r report
		if err := json.Unmarshal(b, &r); err != nil {
			log.Fatal(err)
		}
		if err := r.write(*md, *js); err != nil {
			log.Fatal(err)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	dir := *workDir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "tether-bench-"); err != nil {
			log.Fatal(err)
		}
	}
	log.Printf("bench: logs and files in %s", dir)
	r := &report{Started: time.Now().UTC(), Machine: machine()}
	parts := map[string]bool{}
	for _, p := range strings.Split(*only, ",") {
		parts[strings.TrimSpace(p)] = true
	}
	run := func(name string, f func() error) {
		if !parts[name] || ctx.Err() != nil {
			return
		}
		began := time.Now()
		log.Printf("bench: %s…", name)
		if err := f(); err != nil {
			log.Printf("bench: %s failed: %v", name, err)
			r.Failures = append(r.Failures, fmt.Sprintf("%s: %v", name, err))
		}
		log.Printf("bench: %s took %s", name, time.Since(began).Round(time.Second))
	}
	tunnelO := tunnelOpts{rounds: *rounds, d: 2 * time.Second, rttBlocks: 10, tls: true}
	kubeO := kubeOpts{gets: 3600, blocks200: 9, lists: 17, h2Gets: 3600, h2Lists: 17, agentRest: 12 * time.Second}
	if *short {
		tunnelO = tunnelOpts{rounds: 2, d: 700 * time.Millisecond, rttBlocks: 2, tls: true}
		kubeO = kubeOpts{gets: 200, blocks200: 3, lists: 4, h2Gets: 300, h2Lists: 4, agentRest: time.Second}
	}
	run("tunnel", func() error {
		return benchTunnel(ctx, r, filepath.Join(dir, "tunnel"), tunnelO)
	})
	run("kube", func() error {
		return benchKube(ctx, r, filepath.Join(dir, "kube"), kubeO)
	})
	run("agentrss", func() error {
		var bins []string
		if *agents != "" {
			bins = strings.Split(*agents, ",")
		}
		return benchAgentRSS(ctx, r, filepath.Join(dir, "agentrss"), agentRSSOpts{bins: bins, rounds: *rounds, rest: 12 * time.Second})
	})
	run("probes", func() error {
		return benchProbes(ctx, r, filepath.Join(dir, "probes"), 2000, 12*time.Second, 20*time.Second)
	})
	run("replicas", func() error {
		o := replicaOpts{replicas: 3, perHub: *perHub, h2Gets: 3000, lists: 17, settle: 12 * time.Second, window: 20 * time.Second, kill: true, rolling: true, rollingRP: 20}
		if *short {
			o = replicaOpts{replicas: 3, perHub: 100, h2Gets: 300, lists: 3, settle: 3 * time.Second, window: 6 * time.Second, kill: true}
		}
		return benchReplicas(ctx, r, filepath.Join(dir, "replicas"), o)
	})
	run("fleet", func() error {
		return benchFleet(ctx, r, filepath.Join(dir, "fleet"), fleetOpts{sizes: []int{1000, *fleetN}, settle: 15 * time.Second, storm: true})
	})
	r.Finished = time.Now().UTC()
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		r.Notes = append(r.Notes, "Load average at the end: "+strings.Join(strings.Fields(string(b))[:3], " ")+". The machine is shared: absolute figures move with its load; the ratios and added times compare runs made side by side.")
	}
	if parts["fleet"] {
		r.Notes = append(r.Notes, "The simulated fleet's agents stream no inventory; a real agent's inventory stream adds a goroutine and the stream's buffers on the hub. They run in separate processes on the same 2 cores as the hub, so the reconnect storm's time includes the old hub closing 10,000 connections while their agents react at the same time.")
	}
	if parts["replicas"] {
		r.Notes = append(r.Notes, fmt.Sprintf("Hub replicas: three `bench child hub` processes (server.Serve from `tether hub`'s settings) with TETHER_COORDINATION=kubernetes against a real kube-apiserver, one certificate and one agents list. The simulated agents (%d on each replica) dial their replica straight, not through a load balancer: on one machine its two descriptors per agent would count too; each later connection of an agent goes to another replica at random, as a load balancer's would. `-replica-agents 5000` runs the issue's 15,000 where the cores allow: the descriptors fit (each replica holds 7,500 after one is killed, under `ulimit -n` of 20,000 a process); this machine's 2 shared cores are what keep the default at 6,000.", *perHub))
	}
	if parts["kube"] {
		r.Notes = append(r.Notes, "The agent at rest runs its inventory (its own list and watch of each kind, decision 009) against the local API server, with read access to the inventory kinds as the chart grants it.")
	}
	if *keep {
		if err := r.keepOthers(*js); err != nil {
			log.Fatal(err)
		}
	}
	if err := r.write(*md, *js); err != nil {
		log.Fatal(err)
	}
	log.Printf("bench: wrote %s and %s", *md, *js)
	if len(r.Failures) > 0 {
		os.Exit(1)
	}
}
