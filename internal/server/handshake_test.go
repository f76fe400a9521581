package server

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tetherhq/tether/internal/hub"
	"github.com/tetherhq/tether/internal/protocol"
	"github.com/tetherhq/tether/internal/testutil/fakecluster"
	"github.com/tetherhq/tether/internal/testutil/syncbuf"
	"github.com/tetherhq/tether/internal/tunnel"
)

// badHandshake is one kind of bad agent connection; each returns once the
// hub has answered or dropped it.
type badHandshake func(t *testing.T, addr string, i int) string

// upgrade sends an agent's upgrade request on a new connection with header
// lines, and returns the connection and the hub's answer.
func upgrade(addr string, header ...string) (net.Conn, *http.Response, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	c.SetDeadline(time.Now().Add(20 * time.Second))
	req := "GET /api/agent HTTP/1.1\r\nHost: hub\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n" +
		strings.Join(header, "\r\n") + "\r\n\r\n"
	if len(header) == 0 {
		req = strings.TrimSuffix(req, "\r\n")
	}
	if _, err := c.Write([]byte(req)); err != nil {
		c.Close()
		return nil, nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return c, resp, nil
}

func wantStatus(addr string, want int, header ...string) string {
	c, resp, err := upgrade(addr, header...)
	if err != nil {
		return err.Error()
	}
	c.Close()
	if resp.StatusCode != want {
		return fmt.Sprintf("status %d, want %d", resp.StatusCode, want)
	}
	return ""
}

var badHandshakes = map[string]badHandshake{
	"wrong token": func(t *testing.T, addr string, i int) string {
		// A different name each time, as someone guessing would.
		return wantStatus(addr, 401, fmt.Sprintf("Tether-Agent: guess-%d", i), "Authorization: Bearer wrong-token-"+fmt.Sprint(i))
	},
	"no token": func(t *testing.T, addr string, i int) string {
		return wantStatus(addr, 401, "Tether-Agent: eu-1")
	},
	"garbage frames": func(t *testing.T, addr string, i int) string {
		// A real token, then bytes that are no WebSocket frame at all, or a
		// binary message that is no yamux frame.
		c, resp, err := upgrade(addr, "Tether-Agent: eu-1", "Authorization: Bearer "+testToken)
		if err != nil {
			return err.Error()
		}
		defer c.Close()
		if resp.StatusCode != http.StatusSwitchingProtocols {
			return fmt.Sprintf("status %d", resp.StatusCode)
		}
		if i%2 == 0 {
			c.Write([]byte("\x00\xffthis is not a websocket frame\r\n\r\n"))
		} else {
			// A masked binary frame of 8 bytes: not a yamux header.
			c.Write([]byte{0x82, 0x88, 1, 2, 3, 4, 'g' ^ 1, 'a' ^ 2, 'r' ^ 3, 'b' ^ 4, 'a' ^ 1, 'g' ^ 2, 'e' ^ 3, '!' ^ 4})
		}
		return waitClosed(c)
	},
	"oversized hello": func(t *testing.T, addr string, i int) string {
		// A real token and a valid tunnel, then a hello that says it is
		// larger than any message may be, or as large as one may be and then
		// never comes.
		sess, _, err := tunnel.Dial(context.Background(), "ws://"+addr+"/api/agent", tunnel.DialOptions{Header: http.Header{
			"Tether-Agent": {"eu-1"}, "Authorization": {"Bearer " + testToken}}}, tunnel.DefaultConfig())
		if err != nil {
			return err.Error()
		}
		defer sess.Close()
		st, err := sess.Open(context.Background())
		if err != nil {
			return err.Error()
		}
		var prefix [4]byte
		size := uint32(protocol.MaxMessageSize + 1)
		if i%2 == 1 {
			size = protocol.MaxMessageSize
		}
		binary.BigEndian.PutUint32(prefix[:], size)
		st.Write(prefix[:])
		select {
		case <-sess.Done():
			return ""
		case <-time.After(20 * time.Second):
			return "the hub kept a connection with an oversized hello"
		}
	},
	"slowloris": func(t *testing.T, addr string, i int) string {
		// Headers one byte at a time, never finished.
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return err.Error()
		}
		defer c.Close()
		req := "GET /api/agent HTTP/1.1\r\nHost: hub\r\nTether-Agent: eu-1\r\nX-Slow: "
		for _, b := range []byte(req) {
			if _, err := c.Write([]byte{b}); err != nil {
				return ""
			}
		}
		for {
			time.Sleep(100 * time.Millisecond)
			if _, err := c.Write([]byte("a")); err != nil {
				return "" // the hub gave up on it
			}
			c.SetReadDeadline(time.Now().Add(time.Millisecond))
			if _, err := c.Read(make([]byte, 1)); err != nil && !isTimeoutErr(err) {
				return ""
			}
		}
	},
}

func isTimeoutErr(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// waitClosed waits for the hub to close c.
func waitClosed(c net.Conn) string {
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	buf := make([]byte, 4096)
	for {
		if _, err := c.Read(buf); err != nil {
			if isTimeoutErr(err) {
				return "the hub kept a connection that sent garbage"
			}
			return ""
		}
	}
}

// TestBadHandshakeFlood: 10,000 bad handshakes, 500 at a time, each
// handled as its kind deserves, with the connected agent unaffected, the
// heap bounded and the log rate-limited. The hub lists 6,000 agents, so its
// pace (300 a second) is above the 200 handshakes with a real token in
// flight at once: pacing is TestFloodIsPaced's.
func TestBadHandshakeFlood(t *testing.T) {
	fc := fakecluster.New(t)
	th := &testHub{reg: prometheus.NewRegistry()}
	logs := &syncbuf.Buffer{}
	names := []string{"eu-1"}
	for i := range 5999 {
		names = append(names, fmt.Sprintf("idle-%d", i))
	}
	h, err := New(Config{Agents: testAgents(names...), Logger: slogTo(logs), Heartbeat: time.Second, ProbeInterval: time.Hour,
		HelloTimeout: 2 * time.Second, Registerer: th.reg})
	if err != nil {
		t.Fatal(err)
	}
	// The hub's own server settings, with headers due within 2 s (10 in production).
	srv := httptest.NewUnstartedServer(nil)
	srv.Config = publicServer(h.Handler(), slogTo(logs), 2*time.Second)
	srv.Start()
	defer func() { srv.Close(); h.Close() }()
	th.Hub, th.url, th.logs = h, srv.URL, logs
	addr := srv.Listener.Addr().String()

	a := startAgent(t, th.url, "eu-1", fc)
	eventually(t, 5*time.Second, "connected", a.Connected)
	conn := th.connected("eu-1")

	var peak atomic.Uint64
	heap := func() uint64 {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapInuse
	}
	runtime.GC()
	baseHeap := heap()
	stopSampling := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Add(1)
	go func() {
		defer sampler.Done()
		for {
			select {
			case <-stopSampling:
				return
			case <-time.After(50 * time.Millisecond):
				if v := heap(); v > peak.Load() {
					peak.Store(v)
				}
			}
		}
	}()

	kinds := []string{"wrong token", "no token", "garbage frames", "oversized hello", "slowloris"}
	const total, batch = 10000, 500
	counts := map[string]int{}
	start := time.Now()
	for b := 0; b < total/batch; b++ {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var failures []string
		for j := range batch {
			i := b*batch + j
			kind := kinds[i%len(kinds)]
			counts[kind]++
			wg.Add(1)
			go func() {
				defer wg.Done()
				if why := badHandshakes[kind](t, addr, i); why != "" {
					mu.Lock()
					failures = append(failures, kind+": "+why)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if len(failures) > 0 {
			t.Fatalf("batch %d: %d failures, the first: %s", b, len(failures), failures[0])
		}
		// The agent is unaffected: the same connection, and a request
		// through it works.
		if th.connected("eu-1") != conn || !a.Connected() {
			t.Fatalf("batch %d: the agent's connection changed", b)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		req, _ := http.NewRequestWithContext(ctx, "GET", "https://"+conn.Host()+"/readyz", nil)
		resp, err := conn.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("answered %s", resp.Status)
			}
		}
		cancel()
		if err != nil {
			t.Fatalf("batch %d: a request through the agent: %v", b, err)
		}
	}
	elapsed := time.Since(start)
	close(stopSampling)
	sampler.Wait()

	refusals := strings.Count(logs.String(), "An agent was refused")
	hellos := strings.Count(logs.String(), "failed its hello")
	// At most 20 lines per 10 s window, and one more window for the start.
	windows := int(elapsed/(10*time.Second)) + 1
	t.Logf("%d bad handshakes %v in %s; heap in use %.1f MiB before, peak %.1f MiB; %d refusal and %d hello-failure lines",
		total, counts, elapsed.Round(time.Millisecond), float64(baseHeap)/(1<<20), float64(peak.Load())/(1<<20), refusals, hellos)
	if refusals+hellos > 20*windows {
		t.Errorf("%d refusal lines in %d windows of 10 s, want at most %d", refusals+hellos, windows, 20*windows)
	}
	if got := th.value("tether_agent_connects_total", "accepted"); got != 1 {
		t.Errorf("accepted connects = %v, want the agent's one", got)
	}
	// Bounded: a few hundred concurrent bad connections hold buffers, and
	// the oversized hellos at most a message each; never the sum of all.
	if limit := baseHeap + 512<<20; peak.Load() > limit {
		t.Errorf("heap peaked at %.1f MiB", float64(peak.Load())/(1<<20))
	}
}

// TestFloodIsPaced: handshakes with a real token past the pace of a small
// fleet (100 a second) are answered 503 with a Retry-After while the others
// are under way; once they are over, their places are free again and the
// agent connects at once.
func TestFloodIsPaced(t *testing.T) {
	fc := fakecluster.New(t)
	h := startHub(t, Config{Agents: testAgents("eu-1"), HelloTimeout: 2 * time.Second, ProbeInterval: time.Hour})
	addr := strings.TrimPrefix(h.url, "http://")
	var paced, upgraded, badRetry atomic.Int32
	var wg sync.WaitGroup
	for range 150 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A real token, then a hello that never comes: each holds
			// its place until the hub gives up on it.
			c, resp, err := upgrade(addr, "Tether-Agent: eu-1", "Authorization: Bearer "+testToken)
			if err != nil {
				return
			}
			defer c.Close()
			switch resp.StatusCode {
			case http.StatusServiceUnavailable:
				paced.Add(1)
				// Back within the reconnect spread (10 s), never at once.
				if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || s < 1 || s > 11 {
					badRetry.Add(1)
				}
			case http.StatusSwitchingProtocols:
				upgraded.Add(1)
				waitClosed(c)
			}
		}()
	}
	wg.Wait()
	if upgraded.Load() > hub.MinAdmitRate || paced.Load() == 0 || upgraded.Load()+paced.Load() != 150 {
		t.Fatalf("%d upgraded and %d paced of 150 at once; want at most %d upgraded and the rest paced", upgraded.Load(), paced.Load(), hub.MinAdmitRate)
	}
	if n := badRetry.Load(); n > 0 {
		t.Errorf("%d paced answers without a Retry-After of 1 to 11 s", n)
	}
	a := startAgent(t, h.url, "eu-1", fc)
	eventually(t, 5*time.Second, "the agent connects once the flood is over", a.Connected)
}
