// Command soak runs a hub, a stand-in API server and churning agents in one
// process for a long time, and checks that goroutines, heap and open file
// descriptors stay flat: agents connect and leave, streams open and close,
// watches start and stop. It samples every -sample, fits a least-squares line
// to the samples after the warm-up, and fails when the line rises by more
// than a tolerance over the run. It is a bench command, not a CI test:
//
//	go run ./bench/soak -duration 1h
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetherhq/tether/internal/agent"
	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/listfile"
	"github.com/tetherhq/tether/internal/pki"
	"github.com/tetherhq/tether/internal/server"
)

const (
	agentToken = "soak-agent-token-0123456789abcdef0123456789"
	userToken  = "soak-user-token-0123456789abcdef0123456789"
)

type settings struct {
	duration, sample, warmup time.Duration
	clusters, requesters     int
	watchers                 int
	agentLife                time.Duration
}

func main() {
	var s settings
	flag.DurationVar(&s.duration, "duration", time.Hour, "how long to run")
	flag.DurationVar(&s.sample, "sample", 10*time.Second, "how often to sample goroutines, heap and fds")
	flag.DurationVar(&s.warmup, "warmup", time.Minute, "samples before this are left out of the fit")
	flag.IntVar(&s.clusters, "clusters", 8, "clusters, each with an agent that keeps leaving and coming back")
	flag.IntVar(&s.requesters, "requesters", 4, "goroutines sending short requests")
	flag.IntVar(&s.watchers, "watchers", 4, "goroutines holding watches that end after a random while")
	flag.DurationVar(&s.agentLife, "agent-life", 20*time.Second, "mean time an agent stays before it leaves")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, s, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

// counts are what the load did, for the report.
type counts struct {
	connects, requests, failed, watches, watchEvents atomic.Int64
}

func run(ctx context.Context, s settings, out io.Writer) error {
	ca, err := pki.NewCA("soak cluster CA", 48*time.Hour)
	if err != nil {
		return err
	}
	cert, err := ca.IssueTLS(pki.Leaf{CommonName: "kube-apiserver", Hosts: []string{"kubernetes.default.svc", "127.0.0.1"}})
	if err != nil {
		return err
	}
	api := httptest.NewUnstartedServer(apiHandler())
	api.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	api.StartTLS()
	defer api.Close()
	saDir, err := os.MkdirTemp("", "tether-soak-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(saDir)
	os.WriteFile(filepath.Join(saDir, "token"), []byte("soak-service-account-token"), 0o600)
	os.WriteFile(filepath.Join(saDir, "ca.crt"), ca.CertPEM, 0o600)

	var names []string
	var list []fleet.Agent
	for i := range s.clusters {
		n := fmt.Sprintf("soak-%d", i)
		names = append(names, n)
		list = append(list, fleet.Agent{Name: n, TokenHashes: []listfile.Hash{listfile.HashToken(agentToken)}, Groups: fleet.Groups{Everyone: true}})
	}
	people, err := auth.New(auth.Config{Users: "- name: soak\n  token: " + userToken + "\n  groups: [soakers]\n"})
	if err != nil {
		return err
	}
	defer people.Close()
	h, err := server.New(server.Config{Agents: fleet.New(list), Auth: people, Heartbeat: 2 * time.Second, ProbeInterval: 2 * time.Second, IdleTimeout: 5 * time.Second})
	if err != nil {
		return err
	}
	srv := httptest.NewServer(h.Handler())
	hubURL, _ := url.Parse(srv.URL)

	var c counts
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, n := range names {
		wg.Add(1)
		go func() { defer wg.Done(); churnAgent(loadCtx, s, hubURL, n, saDir, api.Listener.Addr().String(), &c) }()
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16, IdleConnTimeout: 5 * time.Second}}
	for range s.requesters {
		wg.Add(1)
		go func() { defer wg.Done(); request(loadCtx, client, srv.URL, names, &c) }()
	}
	for range s.watchers {
		wg.Add(1)
		go func() { defer wg.Done(); watch(loadCtx, client, srv.URL, names, &c) }()
	}

	start := time.Now()
	var samples []sample
	fmt.Fprintf(out, "soak: %d clusters, %d requesters, %d watchers, for %s, sampling every %s\n", s.clusters, s.requesters, s.watchers, s.duration, s.sample)
	t := time.NewTicker(s.sample)
	end := time.After(s.duration)
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-end:
			break loop
		case <-t.C:
			sm := take(time.Since(start))
			samples = append(samples, sm)
			fmt.Fprintf(out, "%7.0fs goroutines=%d heap=%.1fMiB fds=%d connects=%d requests=%d failed=%d watches=%d\n",
				sm.at.Seconds(), sm.goroutines, sm.heap/(1<<20), sm.fds, c.connects.Load(), c.requests.Load(), c.failed.Load(), c.watches.Load())
		}
	}
	t.Stop()
	stopLoad()
	wg.Wait()
	srv.Close()
	h.Close()
	client.CloseIdleConnections()
	elapsed := time.Since(start)
	fmt.Fprintf(out, "ran %s: %d agent connects, %d requests (%d failed), %d watches with %d events\n",
		elapsed.Round(time.Second), c.connects.Load(), c.requests.Load(), c.failed.Load(), c.watches.Load(), c.watchEvents.Load())
	return verdict(out, samples, s.warmup)
}

// churnAgent runs the agent of one cluster for a random while, stops it, and
// starts it again, until ctx is done.
func churnAgent(ctx context.Context, s settings, hubURL *url.URL, name, saDir, apiAddr string, c *counts) {
	for ctx.Err() == nil {
		a, err := agent.New(agent.Config{
			Options: agent.Options{HubURL: hubURL, Name: name, Token: agentToken, TokenReread: time.Minute,
				ServiceAccountDir: saDir, APIServer: apiAddr},
			Logger:           slog.New(slog.DiscardHandler),
			HandshakeTimeout: 5 * time.Second,
		})
		if err != nil {
			panic(err)
		}
		life := time.Duration(float64(s.agentLife) * (0.5 + rand.Float64()))
		actx, cancel := context.WithTimeout(ctx, life)
		c.connects.Add(1)
		a.Run(actx)
		cancel()
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(rand.IntN(2000)) * time.Millisecond):
		}
	}
}

func get(ctx context.Context, client *http.Client, u string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+userToken)
	return client.Do(req)
}

// request sends short requests to random clusters, a few a second, some of
// which it abandons halfway.
func request(ctx context.Context, client *http.Client, base string, names []string, c *counts) {
	for ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, time.Duration(50+rand.IntN(2000))*time.Millisecond)
		resp, err := get(rctx, client, base+"/clusters/"+names[rand.IntN(len(names))]+"/api/v1/namespaces?size="+fmt.Sprint(rand.IntN(256<<10)))
		c.requests.Add(1)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err == nil && resp.StatusCode != http.StatusOK {
				err = errors.New(resp.Status)
			}
		}
		if err != nil {
			c.failed.Add(1)
		}
		cancel()
		sleepCtx(ctx, time.Duration(100+rand.IntN(400))*time.Millisecond)
	}
}

// watch holds a watch open on a random cluster for a random while.
func watch(ctx context.Context, client *http.Client, base string, names []string, c *counts) {
	buf := make([]byte, 4096)
	for ctx.Err() == nil {
		wctx, cancel := context.WithTimeout(ctx, time.Duration(1+rand.IntN(15))*time.Second)
		resp, err := get(wctx, client, base+"/clusters/"+names[rand.IntN(len(names))]+"/api/v1/pods?watch=true")
		c.watches.Add(1)
		if err == nil {
			for {
				n, err := resp.Body.Read(buf)
				if n > 0 {
					c.watchEvents.Add(1)
				}
				if err != nil {
					break
				}
			}
			resp.Body.Close()
		}
		cancel()
		sleepCtx(ctx, time.Duration(rand.IntN(500))*time.Millisecond)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// apiHandler stands in for an API server: lists answer with the size asked
// for, watches send an event every 200 ms until the client leaves.
func apiHandler() http.Handler {
	chunk := make([]byte, 32<<10)
	for i := range chunk {
		chunk[i] = 'x'
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/readyz":
			io.WriteString(w, "ok")
		case "/version":
			io.WriteString(w, `{"major":"1","minor":"36","gitVersion":"v1.36.3-soak"}`)
		default:
			if r.URL.Query().Get("watch") == "true" {
				t := time.NewTicker(200 * time.Millisecond)
				defer t.Stop()
				for {
					if _, err := io.WriteString(w, `{"type":"MODIFIED","object":{}}`+"\n"); err != nil {
						return
					}
					w.(http.Flusher).Flush()
					select {
					case <-r.Context().Done():
						return
					case <-t.C:
					}
				}
			}
			var size int
			fmt.Sscan(r.URL.Query().Get("size"), &size)
			for size > 0 {
				n := min(size, len(chunk))
				if _, err := w.Write(chunk[:n]); err != nil {
					return
				}
				size -= n
			}
		}
	})
}
