package tunnel

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// stallTransport is connTransport whose data frames, once stalled is set,
// wait for their deadline or Close, as on a connection whose peer stopped
// reading in the middle of a bulk transfer: the frame being written holds
// the session's write lock, and every other frame waits behind it.
type stallTransport struct {
	connTransport
	stalled   atomic.Bool
	writing   chan struct{} // cap 1: a stalled write began
	closed    chan struct{}
	closeOnce sync.Once
}

func (t *stallTransport) WriteFrame(hdr, body []byte, deadline time.Time) error {
	if len(body) == 0 || !t.stalled.Load() {
		return t.connTransport.WriteFrame(hdr, body, deadline)
	}
	notify(t.writing)
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case <-t.closed:
		return net.ErrClosed
	case <-timer.C:
		return os.ErrDeadlineExceeded
	}
}

func (t *stallTransport) Close() error {
	t.closeOnce.Do(func() { close(t.closed) })
	return t.connTransport.Close()
}

// stalledSession starts a session on a stallTransport whose peer reads
// every frame, and opens a stream. stall then has a Write to that stream
// stick in a data frame: the connection takes nothing more until
// WriteTimeout (10 s) ends the session.
func stalledSession(t *testing.T) (s *Session, peer net.Conn, stall func()) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.WriteTimeout = 10 * time.Second
	ours, peer := net.Pipe()
	tr := &stallTransport{connTransport: connTransport{ours}, writing: make(chan struct{}, 1), closed: make(chan struct{})}
	s = newSession(tr, cfg, true)
	t.Cleanup(func() { s.Close(); peer.Close() })
	framesFrom(peer)
	stuck := open(t, s)
	return s, peer, func() {
		t.Helper()
		tr.stalled.Store(true)
		go stuck.Write([]byte("stuck")) // returns once the session ends
		select {
		case <-tr.writing:
		case <-time.After(5 * time.Second):
			t.Fatal("the stuck write never began")
		}
	}
}

// stillUp fails the test if s has ended: the call that just returned
// should have ended before the stalled frame's WriteTimeout ended the
// session, not with it (whose error may look the same: a deadline).
func stillUp(t *testing.T, s *Session, what string) {
	t.Helper()
	select {
	case <-s.done:
		t.Errorf("%s only with the session: %v", what, s.ended())
	default:
	}
}

// TestWriteWaitingForTheConnectionEndsAtItsDeadline: a Write with window
// that waits for another stream's frame to go out still ends at a deadline
// set while it waits, instead of when the session gives up on the
// connection.
func TestWriteWaitingForTheConnectionEndsAtItsDeadline(t *testing.T) {
	s, _, stall := stalledSession(t)
	st := open(t, s)
	stall()
	wrote := make(chan error, 1)
	go func() { _, err := st.Write([]byte("x")); wrote <- err }()
	waitParked(t, 1, "select", inStreamWrite, inLockWrite)
	st.SetWriteDeadline(time.Now())
	select {
	case err := <-wrote:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("Write = %v, want its deadline exceeded", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Write never ended")
	}
	stillUp(t, s, "Write ended")
}

// TestCloseEndsAWriteWaitingForTheConnection: Close unblocks a Write that
// waits for another stream's frame to go out.
func TestCloseEndsAWriteWaitingForTheConnection(t *testing.T) {
	s, _, stall := stalledSession(t)
	st := open(t, s)
	stall()
	wrote := make(chan error, 1)
	go func() { _, err := st.Write([]byte("x")); wrote <- err }()
	waitParked(t, 1, "select", inStreamWrite, inLockWrite)
	go st.Close() // its FIN waits for the connection too
	select {
	case err := <-wrote:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Write = %v, want net.ErrClosed", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Write never ended")
	}
	stillUp(t, s, "Write ended")
}

// TestOpenWaitingForTheConnectionKeepsItsContext: Open, whose SYN waits
// for another stream's frame to go out, ends with its context, and leaves
// no stream behind; so does Accept, whose ACK waits.
func TestOpenWaitingForTheConnectionKeepsItsContext(t *testing.T) {
	s, peer, stall := stalledSession(t)
	stall()
	for _, tc := range []struct {
		name string
		call func(context.Context) (net.Conn, error)
	}{
		{"Open", s.Open},
		{"Accept", func(ctx context.Context) (net.Conn, error) {
			peer.Write(frame(header{typ: typeWindow, flags: flagSYN, stream: 2}))
			waitFor(t, "the peer's stream", func() bool { return s.NumStreams() == 2 })
			return s.Accept(ctx)
		}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		errc := make(chan error, 1)
		go func() { _, err := tc.call(ctx); errc <- err }()
		select {
		case err := <-errc:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s = %v, want its context's deadline", tc.name, err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("%s never ended", tc.name)
		}
		stillUp(t, s, tc.name+" ended")
		cancel()
		if n := s.NumStreams(); n != 1 {
			t.Errorf("after %s gave up, %d streams, want 1: the stuck one", tc.name, n)
		}
	}
}

// TestReadDoesNotWaitForTheConnection: a Read that has data returns it at
// once, though the window it then grants the peer can't go out before
// another stream's stalled frame.
func TestReadDoesNotWaitForTheConnection(t *testing.T) {
	s, peer, stall := stalledSession(t)
	st := open(t, s) // stream 3, with a window of StreamWindow
	half := int(DefaultConfig().StreamWindow / 2)
	peer.Write(frame(header{typ: typeData, stream: 3, length: uint32(half)}, make([]byte, half)...))
	waitFor(t, "the data", func() bool { return Ready(st) })
	stall()
	read := make(chan error, 1)
	go func() { _, err := io.ReadFull(st, make([]byte, half)); read <- err }()
	select {
	case err := <-read:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("a Read with its data never ended")
	}
	stillUp(t, s, "the Read ended")
}
