package main

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"

	"github.com/tetherhq/tether/internal/server"
)

// hubStats is what a hub child reports about itself, after a GC and
// debug.FreeOSMemory.
type hubStats struct {
	HeapAlloc  uint64 `json:"heapAlloc"`
	HeapInuse  uint64 `json:"heapInuse"`
	StackInuse uint64 `json:"stackInuse"`
	Goroutines int    `json:"goroutines"`
	RSS        int64  `json:"rss"`
	// Classes is runtime/metrics' /memory/classes/*: where the Go
	// runtime's mapped memory goes, heap objects and stacks being two of
	// them, so RSS beyond heap and stacks can be told apart.
	Classes map[string]uint64 `json:"classes"`
}

// memoryClasses reads runtime/metrics' /memory/classes/* in bytes.
func memoryClasses() map[string]uint64 {
	var samples []metrics.Sample
	for _, d := range metrics.All() {
		if (strings.HasPrefix(d.Name, "/memory/classes/") || d.Name == "/gc/stack/starting-size:bytes") && d.Kind == metrics.KindUint64 {
			samples = append(samples, metrics.Sample{Name: d.Name})
		}
	}
	metrics.Read(samples)
	out := make(map[string]uint64, len(samples))
	for _, s := range samples {
		out[strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(s.Name, "/memory/classes/"), "/gc/"), ":bytes")] = s.Value.Uint64()
	}
	return out
}

// hubChild runs the hub exactly as `tether hub` does, from TETHER_*
// settings, and beside it a stats listener for the bench.
func hubChild(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("hub", flag.ExitOnError)
	statsAddr := fs.String("stats", "127.0.0.1:0", "where /stats answers")
	fs.Parse(args)
	if r, err := strconv.Atoi(os.Getenv("BENCH_MEMPROFILERATE")); err == nil {
		// For a heap profile that counts every allocation, not one per
		// 512 KiB: BENCH_MEMPROFILERATE=1.
		runtime.MemProfileRate = r
	}
	opts, err := server.OptionsFromEnv(os.Getenv, true)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *statsAddr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/stats", func(w http.ResponseWriter, r *http.Request) {
		// FreeOSMemory collects and returns the free pages to the OS at
		// once, as the runtime's scavenger would in a few minutes at rest:
		// RSS is then what the hub holds, not what a recent GC has yet to
		// give back. The figures are read after it.
		runtime.GC()
		debug.FreeOSMemory()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		json.NewEncoder(w).Encode(hubStats{HeapAlloc: m.HeapAlloc, HeapInuse: m.HeapInuse, StackInuse: m.StackInuse,
			Goroutines: runtime.NumGoroutine(), RSS: rssOf(os.Getpid()), Classes: memoryClasses()})
	})
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	go http.Serve(ln, mux)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	return server.Serve(ctx, opts, log, func(a net.Addr) {
		fmt.Printf("READY %s %s\n", a, ln.Addr())
	})
}

type x509Pool = x509.CertPool

func newPool(pem []byte) *x509.CertPool {
	p := x509.NewCertPool()
	p.AppendCertsFromPEM(pem)
	return p
}
