package agent_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/agent"
	"github.com/tetherhq/tether/internal/protocol"
	"github.com/tetherhq/tether/internal/testutil/fakecluster"
	"github.com/tetherhq/tether/internal/tunnel"
)

// The agent's moves, make-before-break (protocol.ReasonMove), against a hub
// side written here: it admits any agent, welcomes its hello, and hands each
// connection to the test, which sends what a draining replica would.

// moveHub takes agents' connections as a hub does, with the tunnel's own
// upgrade, and queues them for the test.
type moveHub struct {
	url   string
	conns chan *hubConn
	// refuse is how many upgrades from now to answer 503 with
	// Retry-After: 3, as a replica admitting no more agents does.
	refuse  atomic.Int32
	refused atomic.Int32
	// refusedMoves counts the refused upgrades that said Tether-Move.
	refusedMoves atomic.Int32
}

// hubConn is one agent connection as the hub holds it.
type hubConn struct {
	sess  *tunnel.Session
	ctl   net.Conn
	hello protocol.Message
	move  string // the upgrade's Tether-Move
	// agentStreams are the streams the agent opens: the inventory stream.
	agentStreams chan net.Conn
	// said is what the agent says on the control stream after its hello.
	said chan protocol.Message
}

func startMoveHub(t *testing.T) *moveHub {
	t.Helper()
	h := &moveHub{conns: make(chan *hubConn, 8)}
	var (
		mu       sync.Mutex
		sessions []*tunnel.Session
		readers  sync.WaitGroup
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.refuse.Add(-1) >= 0 {
			if r.Header.Get(protocol.MoveHeader) == "1" {
				h.refusedMoves.Add(1)
			}
			h.refused.Add(1)
			w.Header().Set("Retry-After", "3")
			http.Error(w, "draining", http.StatusServiceUnavailable)
			return
		}
		h.refuse.Add(1)
		sess, err := tunnel.Accept(w, r, tunnel.DefaultConfig())
		if err != nil {
			return
		}
		mu.Lock()
		sessions = append(sessions, sess)
		mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ctl, err := sess.Accept(ctx)
		if err != nil {
			return
		}
		hello, err := protocol.Read(ctl)
		if err != nil || hello.Type != protocol.TypeHello {
			sess.Close()
			return
		}
		// A heartbeat longer than any test: the silence rule stays out.
		if protocol.Write(ctl, protocol.Message{Type: protocol.TypeWelcome, HubVersion: "test", HeartbeatMillis: 60_000}) != nil {
			return
		}
		c := &hubConn{sess: sess, ctl: ctl, hello: hello, move: r.Header.Get(protocol.MoveHeader), agentStreams: make(chan net.Conn, 4), said: make(chan protocol.Message, 16)}
		sess.Handle(func(st net.Conn) {
			select {
			case c.agentStreams <- st:
			default:
				st.Close()
			}
		})
		readers.Add(1)
		go func() {
			defer readers.Done()
			defer close(c.said)
			for {
				m, err := protocol.Read(ctl)
				if err != nil {
					return
				}
				select {
				case c.said <- m:
				default:
				}
			}
		}()
		h.conns <- c
	}))
	t.Cleanup(func() {
		srv.Close()
		mu.Lock()
		for _, s := range sessions {
			s.Close()
		}
		mu.Unlock()
		readers.Wait()
	})
	h.url = srv.URL
	return h
}

// next is the agent's next connection.
func (h *moveHub) next(t *testing.T) *hubConn {
	t.Helper()
	select {
	case c := <-h.conns:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("the agent did not connect")
		return nil
	}
}

// send says m on the connection's control stream.
func (c *hubConn) send(t *testing.T, m protocol.Message) {
	t.Helper()
	c.ctl.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if err := protocol.Write(c.ctl, m); err != nil {
		t.Fatalf("send %s: %v", m, err)
	}
}

// pinged sends a ping and waits for its pong: the agent has read all that
// was sent before it.
func (c *hubConn) pinged(t *testing.T, seq uint64) {
	t.Helper()
	c.send(t, protocol.Message{Type: protocol.TypePing, Seq: seq})
	for m := range c.said {
		if m.Type == protocol.TypePong && m.Seq == seq {
			return
		}
	}
	t.Fatal("the connection ended before the pong")
}

// open opens a stream to the API server through the agent, as a person's
// request does, and reads the agent's dial answer.
func (c *hubConn) open(t *testing.T) net.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := c.sess.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	st.SetReadDeadline(time.Now().Add(5 * time.Second))
	m, err := protocol.Read(st)
	if err != nil || m.Type != protocol.TypeDial || m.Error != "" {
		t.Fatalf("dial answer: %+v, %v", m, err)
	}
	return st
}

// echoes checks that text crosses st to the API server and comes back.
func echoes(t *testing.T, st net.Conn, text string) {
	t.Helper()
	st.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := st.Write([]byte(text)); err != nil {
		t.Fatalf("write %q: %v", text, err)
	}
	got := make([]byte, len(text))
	if _, err := io.ReadFull(st, got); err != nil || string(got) != text {
		t.Fatalf("read back %q, %v; want %q", got, err, text)
	}
}

// echoAPI makes the agent's API server an echo: each dial is a pipe whose
// far end sends back what it reads, until the relay closes it.
func echoAPI(c *agent.Config) {
	c.DialAPIServer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		near, far := net.Pipe()
		go func() {
			defer far.Close()
			io.Copy(far, far)
		}()
		return near, nil
	}
}

func moveAway(t *testing.T, c *hubConn) {
	t.Helper()
	c.send(t, protocol.Message{Type: protocol.TypeGoAway, Reason: protocol.ReasonMove})
}

// TestAgentMovesMakeBeforeBreak: on a move goaway the agent connects again
// with move in its hello while a stream open on the old connection goes on
// carrying bytes both ways; the new connection carries new streams; the
// agent stays connected throughout, leaves the old connection open for the
// hub to close, and when the hub does, connects no more.
func TestAgentMovesMakeBeforeBreak(t *testing.T) {
	fc := fakecluster.New(t)
	h := startMoveHub(t)
	a := startAgent(t, h.url, "eu-1", fc, echoAPI)

	old := h.next(t)
	if !old.hello.Moves || old.hello.Move {
		t.Fatalf("the first hello says moves %t, move %t; want true, false", old.hello.Moves, old.hello.Move)
	}
	exec := old.open(t)
	echoes(t, exec, "before the move")

	moveAway(t, old)
	moved := h.next(t)
	if !moved.hello.Move || !moved.hello.Moves {
		t.Fatalf("the hello after a move says moves %t, move %t; want both", moved.hello.Moves, moved.hello.Move)
	}
	echoes(t, exec, "after the move, on the old connection")
	echoes(t, moved.open(t), "on the new connection")
	eventually(t, 5*time.Second, "the agent logs the move", func() bool {
		return strings.Contains(a.Logs.String(), "Moved to another hub replica")
	})
	if !a.Connected() {
		t.Fatal("not connected after the move")
	}
	select {
	case <-old.sess.Done():
		t.Fatal("the agent closed the connection it moved from")
	default:
	}
	echoes(t, exec, "still on the old connection")

	// The hub closes the old connection when its streams are done.
	old.sess.Close()
	eventually(t, 5*time.Second, "the agent sees the old connection end", func() bool {
		return strings.Contains(a.Logs.String(), "The hub closed the connection this agent moved from")
	})
	moved.pinged(t, 1)
	select {
	case c := <-h.conns:
		t.Fatalf("the agent connected again (move %t) when the old connection ended", c.hello.Move)
	default:
	}
	if !a.Connected() {
		t.Fatal("not connected once the old connection ended")
	}
	for _, line := range []string{"Connecting again", "Can't reach", "Nothing from the hub"} {
		if strings.Contains(a.Logs.String(), line) {
			t.Errorf("the agent's log has %q:\n%s", line, a.Logs)
		}
	}
	a.Stop(t)
	if m := lastSaid(moved); m.Type != protocol.TypeBye {
		t.Errorf("the agent's last word on the new connection is %q, want bye", m.Type)
	}
}

// lastSaid is the last thing the agent said on c before it ended.
func lastSaid(c *hubConn) protocol.Message {
	var last protocol.Message
	for m := range c.said {
		last = m
	}
	return last
}

// TestAgentMoveRefusedIsTriedAgain: when the replica the new connection
// reaches refuses it (503, Retry-After), the agent waits as asked and tries
// again, while the old connection goes on working and the agent's health
// says connected.
func TestAgentMoveRefusedIsTriedAgain(t *testing.T) {
	fc := fakecluster.New(t)
	h := startMoveHub(t)
	waits := make(chan time.Duration)
	a := startAgent(t, h.url, "eu-1", fc, echoAPI, recordWaits(waits))

	old := h.next(t)
	exec := old.open(t)
	h.refuse.Store(1)
	moveAway(t, old)
	if d := <-waits; d < 0 || d >= 500*time.Millisecond {
		t.Errorf("waited %s before moving, want less than 500 ms", d)
	}
	// The agent now waits to hand over the 503's wait: it has no new
	// connection, and its health still says connected, on the old one.
	eventually(t, 5*time.Second, "the new connection refused", func() bool { return h.refused.Load() == 1 })
	if !a.Connected() {
		t.Error("not connected while the old connection serves")
	}
	if d := <-waits; d != 3*time.Second {
		t.Errorf("waited %s after the 503, want the 3 s of its Retry-After", d)
	}
	echoes(t, exec, "on the old connection while the new one is refused")
	moved := h.next(t)
	if !moved.hello.Move {
		t.Fatal("the hello after a refused move doesn't say move")
	}
	if old.move != "" || moved.move != "1" || h.refusedMoves.Load() != 1 {
		t.Errorf("Tether-Move on the upgrades: %q first, %q moving, %d of 1 refused; want none on the first, 1 on each move", old.move, moved.move, h.refusedMoves.Load())
	}
	if !strings.Contains(a.Logs.String(), "while moving: the connection it moves from still serves") {
		t.Errorf("the refused move's log doesn't say the old connection still serves:\n%s", a.Logs)
	}
	echoes(t, exec, "on the old connection after the move")
	echoes(t, moved.open(t), "on the new connection")
}

// TestAgentMoveOldEndsFirst: when the connection moved from ends before a
// new one is up, the agent is disconnected, and comes back as after any
// disconnect: its hello says no move.
func TestAgentMoveOldEndsFirst(t *testing.T) {
	fc := fakecluster.New(t)
	h := startMoveHub(t)
	waits := make(chan time.Duration)
	a := startAgent(t, h.url, "eu-1", fc, echoAPI, recordWaits(waits))

	old := h.next(t)
	h.refuse.Store(1)
	moveAway(t, old)
	<-waits // the move's spread; the new connection is then refused
	eventually(t, 5*time.Second, "the new connection refused", func() bool { return h.refused.Load() == 1 })
	old.sess.Close()
	eventually(t, 5*time.Second, "the agent sees the old connection end", func() bool { return !a.Connected() })
	<-waits // the 503's Retry-After
	if c := h.next(t); c.hello.Move {
		t.Fatal("the hello after the old connection ended says move")
	}
	eventually(t, 5*time.Second, "connected again", a.Connected)
}

// TestAgentAfterAMove: on the connection moved from, a shutdown goaway is
// ignored (its streams go on) and a takeover still stops the agent.
func TestAgentAfterAMove(t *testing.T) {
	tests := []struct {
		reason   string
		wantStop bool
	}{
		{protocol.ReasonShutdown, false},
		{protocol.ReasonMove, false},
		{protocol.ReasonTakeover, true},
	}
	for _, tt := range tests {
		t.Run(tt.reason, func(t *testing.T) {
			fc := fakecluster.New(t)
			h := startMoveHub(t)
			a := startAgent(t, h.url, "eu-1", fc, echoAPI)
			old := h.next(t)
			exec := old.open(t)
			moveAway(t, old)
			moved := h.next(t)

			old.send(t, protocol.Message{Type: protocol.TypeGoAway, Reason: tt.reason})
			if tt.wantStop {
				var refused *agent.RefusedError
				if err := a.Wait(t, 5*time.Second); !errors.As(err, &refused) {
					t.Fatalf("the agent returned %v, want a refusal", err)
				}
				if m := lastSaid(moved); m.Type != protocol.TypeBye {
					t.Errorf("the agent's last word on the new connection is %q, want bye", m.Type)
				}
				return
			}
			old.pinged(t, 1)
			echoes(t, exec, "after a "+tt.reason+" goaway on the old connection")
			select {
			case c := <-h.conns:
				t.Fatalf("the agent connected again (move %t)", c.hello.Move)
			case <-a.Done():
				t.Fatalf("the agent stopped: %v", a.Err())
			default:
			}
		})
	}
}

// TestAgentMovesItsInventoryStream: the inventory stream ends on the
// connection moved from and begins again, snapshot first, on the new one.
func TestAgentMovesItsInventoryStream(t *testing.T) {
	fc := fakecluster.New(t)
	h := startMoveHub(t)
	startAgent(t, h.url, "eu-1", fc, func(c *agent.Config) {
		w, err := agent.NewWatcher(c.Options, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		c.Inventory = w
	})
	snapshot := func(c *hubConn) net.Conn {
		t.Helper()
		var st net.Conn
		select {
		case st = <-c.agentStreams:
		case <-time.After(10 * time.Second):
			t.Fatal("no inventory stream")
		}
		st.SetReadDeadline(time.Now().Add(time.Minute))
		u, err := protocol.ReadUpdate(st)
		if err != nil || !u.Snapshot {
			t.Fatalf("the inventory stream begins with %+v, %v; want a snapshot", u, err)
		}
		return st
	}
	old := h.next(t)
	oldInv := snapshot(old)
	moveAway(t, old)
	moved := h.next(t)
	snapshot(moved)
	oldInv.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		if _, err := protocol.ReadUpdate(oldInv); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("the old inventory stream ended with %v, want its end", err)
			}
			break
		}
	}
	select {
	case <-old.sess.Done():
		t.Fatal("the old connection closed with its inventory stream")
	default:
	}
}
