package server

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/hub"
	"github.com/tetherhq/tether/internal/listfile"
	"github.com/tetherhq/tether/internal/testutil/fakecluster"
	"github.com/tetherhq/tether/internal/testutil/faultproxy"
)

// Faults between the hub and its agent while people's requests are open
// through them, seen from the people's side: what a kubectl watch, exec or
// get gets when the path to the agent goes silent, or the agent vanishes
// mid-answer.

// personHubBehindProxy starts a hub that people can use, with the cluster
// "open" whose agent, for fc, reaches the hub through a fault proxy.
func personHubBehindProxy(t *testing.T, fc *fakecluster.Cluster, heartbeat time.Duration) (*testHub, *runningAgent, *faultproxy.Proxy) {
	t.Helper()
	people, err := auth.New(auth.Config{Users: testUsers})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { people.Close() })
	list := fleet.New([]fleet.Agent{{Name: "open", TokenHashes: []listfile.Hash{listfile.HashToken(testToken)}, Groups: fleet.Groups{Everyone: true}}})
	h := startHub(t, Config{Agents: list, Auth: people, Heartbeat: heartbeat, ProbeInterval: time.Hour, IdleTimeout: 200 * time.Millisecond})
	p := hubProxy(t, h)
	a := startAgent(t, h.url, "open", fc, viaProxy(t, p))
	eventually(t, 5*time.Second, "connected", func() bool { return a.Connected() && h.connected("open") != nil })
	return h, a, p
}

// openWatch starts a watch through the hub and reads its first event.
func openWatch(t *testing.T, h *testHub) *bufio.Reader {
	t.Helper()
	resp, err := getAs(t.Context(), http.DefaultClient, h.url+"/clusters/open/watch?watch=1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		t.Fatalf("watch: %s: %s", resp.Status, body)
	}
	r := bufio.NewReader(resp.Body)
	if line, err := r.ReadString('\n'); err != nil || !strings.Contains(line, `"n":1`) {
		t.Fatalf("the watch's first event: %q, %v", line, err)
	}
	return r
}

// openExec upgrades a connection through the hub as alice, as kubectl
// exec does, to the fake API server's echo protocol, and checks that it
// echoes.
func openExec(t *testing.T, h *testHub) (net.Conn, *bufio.Reader) {
	t.Helper()
	return sessionAs(t, h, aliceToken)
}

// ending runs read in a goroutine and returns a channel that gets its
// error once it returns.
func ending(read func() error) <-chan error {
	done := make(chan error, 1)
	go func() { done <- read() }()
	return done
}

// endsWithin waits for an ended read; within is a guard against a hang,
// not a measure of speed.
func endsWithin(t *testing.T, done <-chan error, within time.Duration, what string) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(within):
		t.Fatalf("%s still waits %s after the fault", what, within)
		return nil
	}
}

// TestSilentDropUnderAWatchAndAnExec: the network between hub and agent
// drops every packet, with no FIN or RST (a NAT that lost its state). The
// watch, the exec and the download open through the hub end once the hub's
// heartbeat gives up on the agent: the watch and the download with an
// error, not the clean end of an answer the API server closed, and the
// exec's connection closed. Nothing is left open on either side: the hub's
// streams, and the agent's connections to its API server once it notices
// the silence too. When the path is back, the agent is, and a new watch
// works.
func TestSilentDropUnderAWatchAndAnExec(t *testing.T) {
	const heartbeat = time.Second
	fc := fakecluster.New(t)
	h, a, p := personHubBehindProxy(t, fc, heartbeat)
	conn := h.connected("open")
	watch := openWatch(t, h)
	exec, execReader := openExec(t, h)
	// And a download under way, read as fast as it comes.
	download, err := getAs(t.Context(), http.DefaultClient, h.url+"/clusters/open/big")
	if err != nil {
		t.Fatal(err)
	}
	defer download.Body.Close()
	downloadEnded := ending(func() error { _, err := io.Copy(io.Discard, download.Body); return err })
	eventually(t, 5*time.Second, "the watch at the API server", func() bool { return fc.Watching.Load() == 1 })

	droppedAt := time.Now()
	p.SetBlackhole(true)
	watchEnded := ending(func() error { _, err := io.Copy(io.Discard, watch); return err })
	execEnded := ending(func() error { _, err := io.Copy(io.Discard, execReader); return err })
	// The exec session types on into the silence.
	io.WriteString(exec, "anyone there?")

	// The hub gives up after two heartbeats and a second of silence; ten
	// times that is a guard, not a bound.
	guard := 10 * (2*heartbeat + time.Second)
	err = endsWithin(t, watchEnded, guard, "the watch")
	if err == nil {
		t.Error("the watch ended cleanly after the path to the agent went silent: a client would take it for the API server's own end")
	}
	select {
	case <-conn.Context().Done(): // the hub gave up on the connection: that ended the watch
	default:
		t.Errorf("the watch ended (%v) while the hub still held the silent connection", err)
	}
	t.Logf("the watch ended %s after the drop (heartbeat %s): %v", time.Since(droppedAt).Round(time.Millisecond), heartbeat, err)
	if err := endsWithin(t, downloadEnded, guard, "the download"); err == nil {
		t.Error("the download ended cleanly after the path to the agent went silent")
	} else {
		t.Logf("the download ended %s after the drop: %v", time.Since(droppedAt).Round(time.Millisecond), err)
	}
	err = endsWithin(t, execEnded, guard, "the exec session")
	t.Logf("the exec session's connection ended %s after the drop: %v", time.Since(droppedAt).Round(time.Millisecond), err)
	eventually(t, guard, "the hub's streams closed", func() bool {
		return h.streamsOpen() == 0 && h.value("tether_streams_opened_total") == h.value("tether_streams_closed_total")
	})
	eventually(t, guard, "the agent closes its connection to the API server", func() bool { return fc.Watching.Load() == 0 })
	// The hub logs the disconnect once the connection's goroutines are
	// done, which may come after its streams closed.
	eventually(t, guard, "the hub's log says why it dropped the agent", func() bool {
		return strings.Contains(h.logs.String(), "nothing from the agent in 3 s")
	})

	p.SetBlackhole(false)
	eventually(t, 10*time.Second, "the agent is back once the path is", func() bool {
		return a.Connected() && h.connected("open") != nil
	})
	openWatch(t, h)
}

// TestAgentGoneMidAnswer: the agent's connection vanishes with a reset, as
// when its process is killed or the hub's is, while answers are on their
// way. Each client gets an error: a watch, a chunked answer and one of
// known length cut midway (never a clean end: the client would take what
// came for all there is), and a request whose answer hadn't begun gets a
// 503. New requests get a 503 at once; the hub's streams are closed, and on
// the agent's side the connections to the API server too. Once the hub's
// address answers again the agent is back.
func TestAgentGoneMidAnswer(t *testing.T) {
	fc := fakecluster.New(t)
	fc.ReadyzDelay.Store(int64(time.Hour)) // /readyz answers only once its request is gone
	h, a, p := personHubBehindProxy(t, fc, time.Second)

	watch := openWatch(t, h)
	stream, err := getAs(t.Context(), http.DefaultClient, h.url+"/clusters/open/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	streamReader := bufio.NewReader(stream.Body)
	if line, err := streamReader.ReadString('\n'); err != nil || line != "event 1\n" {
		t.Fatalf("the chunked answer's first line: %q, %v", line, err)
	}
	sized, err := getAs(t.Context(), http.DefaultClient, h.url+"/clusters/open/partial")
	if err != nil {
		t.Fatal(err)
	}
	defer sized.Body.Close()
	if sized.ContentLength != fakecluster.PartialLength {
		t.Fatalf("the answer of known length came with Content-Length %d", sized.ContentLength)
	}
	// Half of it was sent; the hub may hold the last few KiB of that until
	// more comes (it flushes answers of known length only at their end).
	if _, err := io.ReadFull(sized.Body, make([]byte, fakecluster.PartialLength/4)); err != nil {
		t.Fatal(err)
	}
	pending := ending(func() error {
		resp, err := getAs(t.Context(), http.DefaultClient, h.url+"/clusters/open/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			return errors.New(resp.Status)
		}
		return nil
	})
	eventually(t, 5*time.Second, "the watch and the waiting request at the API server", func() bool {
		return fc.Watching.Load() == 2 && fc.Count("/readyz") == 1
	})

	ends := map[string]<-chan error{
		"a watch":                   ending(func() error { _, err := io.Copy(io.Discard, watch); return err }),
		"a chunked answer":          ending(func() error { _, err := io.Copy(io.Discard, streamReader); return err }),
		"an answer of known length": ending(func() error { _, err := io.Copy(io.Discard, sized.Body); return err }),
	}
	// Gone: every connection through the proxy reset, and no new one taken,
	// so the agent can't come back.
	addr := p.Addr()
	p.Close()
	for what, done := range ends {
		if err := endsWithin(t, done, 30*time.Second, what); err == nil {
			t.Errorf("%s cut by the agent's end ended cleanly", what)
		}
	}
	if err := endsWithin(t, pending, 30*time.Second, "a request waiting for its answer"); err != nil {
		t.Errorf("a request waiting for its answer when the agent went: %v, want 503", err)
	}
	eventually(t, 10*time.Second, "the hub drops the agent", func() bool { return h.connected("open") == nil })
	status, body, _ := call(t, "GET", h.url+"/clusters/open/api", aliceToken, nil)
	if status != http.StatusServiceUnavailable || !strings.Contains(body, hub.MessageNotConnected) {
		t.Errorf("a new request: %d %s, want 503 saying the agent isn't connected", status, body)
	}
	eventually(t, 10*time.Second, "the hub's streams closed", func() bool {
		return h.streamsOpen() == 0 && h.value("tether_streams_opened_total") == h.value("tether_streams_closed_total")
	})
	// From the agent's side the hub's end vanished, as when the hub is
	// killed: its relays end with the connection, not after a timeout.
	eventually(t, 10*time.Second, "the agent's connections to the API server closed", func() bool { return fc.Watching.Load() == 0 })

	// The hub's address answers again (a hub started again there): the
	// agent connects, and watches work.
	back, err := faultproxy.NewAt(addr, strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	eventually(t, 10*time.Second, "the agent connects again", func() bool { return a.Connected() && h.connected("open") != nil })
	openWatch(t, h)
}

// TestUpgradedSessionCutByTheAPIServerEnds: the API server's end of an exec
// session (an upgraded connection) is reset mid-session. The hub ends the
// session and lets its stream go at once, rather than pass the end on as a
// half-close and hold the session until the client next writes or leaves.
func TestUpgradedSessionCutByTheAPIServerEnds(t *testing.T) {
	fc := fakecluster.New(t)
	h, _, _ := personHubBehindProxy(t, fc, time.Second)
	c, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /clusters/open/reset-upgrade HTTP/1.1\r\nHost: hub\r\nAuthorization: Bearer "+aliceToken+
		"\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v, %v", resp, err)
	}
	hello := make([]byte, 5)
	if _, err := io.ReadFull(br, hello); err != nil || string(hello) != "hello" {
		t.Fatalf("the session's greeting: %q, %v", hello, err)
	}
	io.WriteString(c, "x")                              // the API server's end is reset once it reads this
	c.SetReadDeadline(time.Now().Add(30 * time.Second)) // a guard against a hang
	if rest, err := io.ReadAll(br); len(rest) != 0 || isTimeoutErr(err) {
		t.Fatalf("after the API server's reset the client read %q, %v; want the end", rest, err)
	}
	// The client says nothing more and stays. The hub must not wait for it.
	eventually(t, 10*time.Second, "the hub lets the session's stream go", func() bool {
		return h.streamsOpen() == 0 && h.value("tether_streams_opened_total") == h.value("tether_streams_closed_total")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.WaitRequests(ctx); err != nil {
		t.Errorf("the hub still counts the session as open: %v", err)
	}
}
