package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/listfile"
	"github.com/tetherhq/tether/internal/pki"
)

// A flood: many people's requests through one hub and one agent to an API
// server, each reading its answer slowly or not at all, while another person
// sends small GETs (issue 33, item 2). The API server is a TLS server in
// this process that answers as kube-apiserver would for the paths used; the
// hub and the agent are processes of their own, so their RSS is theirs.

// floodOpts size a flood.
type floodOpts struct {
	people    int      // people who flood, each with a token of their own
	slow      int      // slow readers of the big list, spread over the people
	watches   int      // idle watches, spread over the people
	listBytes int      // the big list's size
	gets      int      // the other person's small GETs, before and during
	hubEnv    []string // more hub settings
}

// floodResult is what a flood measured.
type floodResult struct {
	hubRSSBefore, hubRSSPeak     float64 // MiB
	agentRSSBefore, agentRSSPeak float64 // MiB
	hubGoroutines                int
	agentFDs                     int
	getP50Before, getP50During   float64 // ms
	statuses                     map[int]int
	ready                        bool // the cluster was Ready after the flood's probes
	probesDuring                 int64
}

func (r floodResult) String() string {
	return fmt.Sprintf("hub RSS %.1f → %.1f MiB (%d goroutines); agent RSS %.1f → %.1f MiB (%d fds); other person's GET p50 %.2f → %.2f ms; answers %v; probes during %d, Ready %v",
		r.hubRSSBefore, r.hubRSSPeak, r.hubGoroutines, r.agentRSSBefore, r.agentRSSPeak, r.agentFDs, r.getP50Before, r.getP50During, r.statuses, r.probesDuring, r.ready)
}

// fakeAPIServer answers /readyz, /version, a small ConfigMap, a big list of
// pods, and watches that stay open with nothing to say.
type fakeAPIServer struct {
	addr    string
	caPEM   []byte
	readyz  atomic.Int64 // the /readyz the hub's probes asked
	closeFn func()
}

func startFakeAPIServer(listBytes int) (*fakeAPIServer, error) {
	ca, err := pki.NewCA("flood cluster CA", 24*time.Hour)
	if err != nil {
		return nil, err
	}
	cert, err := ca.IssueTLS(pki.Leaf{CommonName: "kube-apiserver", Hosts: []string{"kubernetes.default.svc", "127.0.0.1"}})
	if err != nil {
		return nil, err
	}
	// A list of pods of about listBytes, as JSON.
	var big strings.Builder
	big.WriteString(`{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[`)
	pad := strings.Repeat("x", 900)
	for i := 0; big.Len() < listBytes; i++ {
		if i > 0 {
			big.WriteByte(',')
		}
		fmt.Fprintf(&big, `{"metadata":{"name":"pod-%06d","namespace":"bench","annotations":{"pad":%q}}}`, i, pad)
	}
	big.WriteString("]}")
	list := []byte(big.String())
	f := &fakeAPIServer{caPEM: ca.CertPEM}
	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		f.readyz.Add(1)
		w.Write([]byte("ok"))
	})
	mux.HandleFunc("/version", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{"gitVersion":"v1.36.3-flood"}`)) })
	mux.HandleFunc("/api/v1/namespaces/bench/configmaps/small", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"small","namespace":"bench"},"data":{"a":"b"}}`))
	})
	mux.HandleFunc("/api/v1/pods", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("watch") != "" {
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		w.Header().Set("Content-Length", fmt.Sprint(len(list)))
		w.Write(list)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(404)
		w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`))
	})
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	f.addr = ln.Addr().String()
	f.closeFn = func() { srv.Close() }
	return f, nil
}

// benchFlood starts a hub, an agent and the fake API server, measures the
// other person's small GETs and both processes' RSS at rest, then floods
// and measures again.
func benchFlood(ctx context.Context, dir string, o floodOpts) (floodResult, error) {
	var res floodResult
	api, err := startFakeAPIServer(o.listBytes)
	if err != nil {
		return res, err
	}
	defer api.closeFn()
	hf, err := writeHubCert(dir)
	if err != nil {
		return res, err
	}
	saDir := filepath.Join(dir, "sa")
	os.MkdirAll(saDir, 0o755)
	os.WriteFile(filepath.Join(saDir, "token"), []byte("bench-service-account-token"), 0o600)
	os.WriteFile(filepath.Join(saDir, "ca.crt"), api.caPEM, 0o600)
	tokens := make([]string, o.people+1) // the last is the other person's
	var users strings.Builder
	for i := range tokens {
		tokens[i], _ = fleet.NewToken()
		fmt.Fprintf(&users, "- name: flood-%03d\n  tokenSha256: %s\n", i, listfile.TokenSHA256(tokens[i]))
	}
	addr, err := freePort()
	if err != nil {
		return res, err
	}
	self, _ := os.Executable()
	f := &fleetRun{dir: dir, self: self, hubURL: "https://" + addr, hubCA: hf.caFile, saDir: saDir,
		hubEnv: append(benchHubEnv(addr, hf, dir, "TETHER_FLEET_AGENTS="+fleet.AgentsEntry(agentName(0), listfile.TokenSHA256(agentToken(0))), users.String()), o.hubEnv...)}
	if err := f.startHub(ctx, 1); err != nil {
		return res, err
	}
	defer f.stop()
	if err := f.startAgents(ctx, 0, 1, api.addr); err != nil {
		return res, err
	}
	if err := f.waitConnected(ctx, 1, time.Minute); err != nil {
		return res, err
	}
	agentPID := f.kids[0].pid()
	base := f.hubURL + "/clusters/" + agentName(0)
	tlsConfig := hf.pool
	status := func() string {
		req, _ := http.NewRequestWithContext(ctx, "GET", f.hubURL+"/api/clusters/"+agentName(0), nil)
		req.Header.Set("Authorization", "Bearer "+tokens[o.people])
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig}}
		defer c.CloseIdleConnections()
		resp, err := c.Do(req)
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	for deadline := time.Now().Add(time.Minute); !strings.Contains(status(), `"status":"Ready"`); {
		if time.Now().After(deadline) {
			return res, fmt.Errorf("the cluster isn't Ready after a minute: %s", status())
		}
		time.Sleep(200 * time.Millisecond)
	}
	other := &client{base: base, tls: tlsConfig, header: http.Header{"Authorization": {"Bearer " + tokens[o.people]}}}
	other.init(false)
	defer other.c.CloseIdleConnections()
	p50 := func() (float64, error) {
		lat := make([]float64, 0, o.gets)
		for range o.gets {
			t0 := time.Now()
			if _, err := other.get(ctx, "/api/v1/namespaces/bench/configmaps/small"); err != nil {
				return 0, err
			}
			lat = append(lat, float64(time.Since(t0).Microseconds())/1000)
		}
		return median(lat), nil
	}
	p50() // warm: the connection made, the pool filled
	if res.getP50Before, err = p50(); err != nil {
		return res, err
	}
	res.hubRSSBefore = float64(f.hub.rss()) / (1 << 20)
	res.agentRSSBefore = float64(rssOf(agentPID)) / (1 << 20)

	// The flood: each slow reader and watch is a connection of its own,
	// over HTTP/1.1 as kubectl's watches are; slow readers read a little
	// now and then, watches nothing.
	floodCtx, stopFlood := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var mu sync.Mutex
	res.statuses = map[int]int{}
	started := make(chan struct{}, o.slow+o.watches)
	open := func(i int, path string, trickle bool) {
		defer wg.Done()
		conn, err := tls.Dial("tcp", addr, tlsConfig)
		if err != nil {
			started <- struct{}{}
			mu.Lock()
			res.statuses[-1]++
			mu.Unlock()
			return
		}
		defer conn.Close()
		context.AfterFunc(floodCtx, func() { conn.Close() })
		fmt.Fprintf(conn, "GET /clusters/%s%s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nAccept: application/json\r\n\r\n", agentName(0), path, addr, tokens[i%o.people])
		br := bufio.NewReaderSize(conn, 4<<10)
		resp, err := http.ReadResponse(br, nil)
		code := -2
		if err == nil {
			code = resp.StatusCode
		}
		mu.Lock()
		res.statuses[code]++
		mu.Unlock()
		started <- struct{}{}
		if err != nil || code != 200 {
			return
		}
		buf := make([]byte, 4<<10)
		for floodCtx.Err() == nil {
			if trickle {
				if _, err := resp.Body.Read(buf); err != nil {
					return
				}
			}
			select {
			case <-floodCtx.Done():
			case <-time.After(time.Second):
			}
		}
	}
	for i := range o.slow {
		wg.Add(1)
		go open(i, "/api/v1/pods", true)
	}
	for i := range o.watches {
		wg.Add(1)
		go open(i, "/api/v1/pods?watch=1", false)
	}
	defer func() { stopFlood(); wg.Wait() }()
	for range o.slow + o.watches {
		select {
		case <-started:
		case <-ctx.Done():
			return res, ctx.Err()
		}
	}
	// Every request has its answer's head, and the slow readers' answers
	// fill what buffers they may. Sample RSS while the other person's
	// GETs run, and keep the peak.
	peak := func() {
		res.hubRSSPeak = max(res.hubRSSPeak, float64(f.hub.rss())/(1<<20))
		res.agentRSSPeak = max(res.agentRSSPeak, float64(rssOf(agentPID))/(1<<20))
	}
	probes0 := api.readyz.Load()
	for range 10 {
		time.Sleep(time.Second)
		peak()
	}
	if res.getP50During, err = p50(); err != nil {
		return res, fmt.Errorf("the other person's GET during the flood: %w", err)
	}
	peak()
	for api.readyz.Load() == probes0 && ctx.Err() == nil { // a probe came during the flood
		time.Sleep(200 * time.Millisecond)
	}
	res.probesDuring = api.readyz.Load() - probes0
	res.ready = strings.Contains(status(), `"status":"Ready"`)
	peak()
	if s, err := f.hubStats(); err == nil {
		res.hubGoroutines = s.Goroutines
	}
	if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", agentPID)); err == nil {
		res.agentFDs = len(ents)
	}
	f.saveProfiles(1)
	log.Printf("bench: flood: %s", res)
	return res, nil
}
