package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/tetherhq/tether/internal/pki"
)

// benchProbes measures the hub's CPU at rest under n agents twice: with
// their API server answering the hub's probes (one in-process TLS server,
// serving /readyz and /version as kube-apiserver does), and with nothing
// listening at its address, as the idle fleet above runs. What the first
// adds is the probes' work: every ProbeInterval (10 s) each cluster's probe
// sends two GETs to its API server, on the connection the last one kept
// (decision 019).
func benchProbes(ctx context.Context, r *report, dir string, n int, settle, window time.Duration) error {
	ca, err := pki.NewCA("bench cluster CA", 24*time.Hour)
	if err != nil {
		return err
	}
	cert, err := ca.IssueTLS(pki.Leaf{CommonName: "kube-apiserver", Hosts: []string{"kubernetes.default.svc", "127.0.0.1"}})
	if err != nil {
		return err
	}
	var answered atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) { answered.Add(1); w.Write([]byte("ok")) })
	mux.HandleFunc("/version", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{"gitVersion":"v1.36.3-bench"}`)) })
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	defer srv.Close()

	type atRest struct {
		cores  float64 // the hub's CPU-seconds per second
		probes int64   // probes answered in the window
		kib    float64 // the hub's heap and stacks per agent, KiB
		rss    float64 // its RSS per agent, KiB
	}
	measure := func(name, api string) (atRest, error) {
		f, err := newFleet(ctx, filepath.Join(dir, name), n, ca.CertPEM)
		if err != nil {
			return atRest{}, err
		}
		defer f.stop()
		time.Sleep(2 * time.Second)
		base, err := f.hubStats()
		if err != nil {
			return atRest{}, err
		}
		if err := f.startAgents(ctx, 0, n, api); err != nil {
			return atRest{}, err
		}
		if err := f.waitConnected(ctx, n, 3*time.Minute); err != nil {
			return atRest{}, err
		}
		time.Sleep(settle) // the agents' first probes and connects are done
		c0, p0 := f.hub.cpu(), answered.Load()
		select {
		case <-time.After(window):
		case <-ctx.Done():
			return atRest{}, ctx.Err()
		}
		cores, probes := (f.hub.cpu()-c0).Seconds()/window.Seconds(), answered.Load()-p0
		s, err := f.hubStats()
		if err != nil {
			return atRest{}, err
		}
		f.saveProfiles(n)
		per := func(a, b uint64) float64 { return (float64(a) - float64(b)) / float64(n) / 1024 }
		return atRest{cores: cores, probes: probes,
			kib: per(s.HeapAlloc+s.StackInuse, base.HeapAlloc+base.StackInuse), rss: per(uint64(s.RSS), uint64(base.RSS))}, nil
	}
	up, err := measure("answering", ln.Addr().String())
	if err != nil {
		return err
	}
	down, err := measure("unreachable", "")
	if err != nil {
		return err
	}
	perThousand := func(cores float64) float64 { return cores * 100 * 1000 / float64(n) }
	r.add(figure{Section: "probes", Name: "hub CPU at rest per 1,000 agents, their API servers answering", Value: perThousand(up.cores), Unit: "% of a core",
		Detail: fmt.Sprintf("%d agents (TLS): the hub used %.3f CPU-s per s over %s; %d probes answered (%.0f a second); hub heap + stacks %.1f KiB, RSS %.1f KiB per agent",
			n, up.cores, window, up.probes, float64(up.probes)/window.Seconds(), up.kib, up.rss)})
	r.add(figure{Section: "probes", Name: "hub CPU at rest per 1,000 agents, their API servers unreachable", Value: perThousand(down.cores), Unit: "% of a core",
		Detail: fmt.Sprintf("the same, nothing listening at the API server's address (as the idle fleet above): %.3f CPU-s per s, heartbeats and failed probes; hub heap + stacks %.1f KiB, RSS %.1f KiB per agent", down.cores, down.kib, down.rss)})
	if up.probes > 0 {
		r.add(figure{Section: "probes", Name: "hub CPU per probe that reaches its API server", Value: (up.cores - down.cores) * window.Seconds() / float64(up.probes) * 1e6, Unit: "µs",
			Detail: "the difference between the two, per probe answered: GET /readyz and /version on the connection the last probe kept (decision 019)"})
	}
	return nil
}
