package tunnel

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// accept takes the next stream the peer opens, failing the test after 5 s.
func accept(t *testing.T, s *Session) net.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := s.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func open(t *testing.T, s *Session) net.Conn {
	t.Helper()
	st, err := s.Open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("still waiting after 5 s: %s", what)
}

// noStreams waits until neither session tracks a stream: every stream that
// ended was forgotten on both sides.
func noStreams(t *testing.T, a, b *Session) {
	t.Helper()
	waitFor(t, "both sessions to forget their streams", func() bool { return a.NumStreams() == 0 && b.NumStreams() == 0 })
}

// TestHalfClose: a request, its end (FIN), then the answer the other way,
// as a relayed HTTP/1.0 exchange would go.
func TestHalfClose(t *testing.T) {
	c, s := pair(t, false)
	st := open(t, c)
	if _, err := st.Write([]byte("request")); err != nil {
		t.Fatal(err)
	}
	if err := st.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Write([]byte("more")); err == nil {
		t.Error("a write after CloseWrite succeeded")
	}
	in := accept(t, s)
	got, err := io.ReadAll(in)
	if err != nil || string(got) != "request" {
		t.Fatalf("server read %q, %v; want the request and EOF", got, err)
	}
	if _, err := in.Write([]byte("answer")); err != nil {
		t.Fatalf("writing back after the peer's FIN: %v", err)
	}
	in.Close()
	got, err = io.ReadAll(st)
	if err != nil || string(got) != "answer" {
		t.Fatalf("client read %q, %v; want the answer and EOF", got, err)
	}
	st.Close()
	noStreams(t, c, s)
}

// TestCloseWithUnreadDataResets: closing a stream the peer is still writing
// to resets it, so the writer stops at once instead of filling a window
// nobody reads, and both sides forget the stream.
func TestCloseWithUnreadDataResets(t *testing.T) {
	c, s := pair(t, false)
	st := open(t, c)
	st.Write([]byte("go"))
	in := accept(t, s)
	in.Read(make([]byte, 2))
	werr := make(chan error, 1)
	go func() {
		chunk := make([]byte, 32<<10)
		for {
			if _, err := in.Write(chunk); err != nil {
				werr <- err
				return
			}
		}
	}()
	if _, err := io.ReadFull(st, make([]byte, 100<<10)); err != nil {
		t.Fatal(err)
	}
	st.Close()
	select {
	case err := <-werr:
		if !errors.Is(err, ErrStreamReset) {
			t.Errorf("the writer's error = %v, want ErrStreamReset", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the writer still writes 5 s after its reader closed")
	}
	if _, err := st.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Read after Close = %v, want net.ErrClosed", err)
	}
	in.Close()
	noStreams(t, c, s)
}

// TestStalledStreamDoesNotSlowOthers: a stream whose reader never reads
// stops its writer once its window is full, and another stream still
// carries 16 MiB both ways.
func TestStalledStreamDoesNotSlowOthers(t *testing.T) {
	cfg := DefaultConfig()
	cfg.StreamWindow = 256 << 10
	c, s := pairWith(t, false, cfg)
	stalled := open(t, c)
	stalled.Write([]byte("x"))
	stalledIn := accept(t, s) // never read beyond this
	var written int
	var mu sync.Mutex
	blocked := make(chan error, 1)
	go func() {
		chunk := make([]byte, 16<<10)
		stalled.SetWriteDeadline(time.Now().Add(10 * time.Second))
		for {
			n, err := stalled.Write(chunk)
			mu.Lock()
			written += n
			mu.Unlock()
			if err != nil {
				blocked <- err
				return
			}
		}
	}()
	payload := make([]byte, 16<<20)
	rand.Read(payload)
	for _, dir := range []struct {
		name     string
		from, to *Session
	}{{"client to server", c, s}, {"server to client", s, c}} {
		out := open(t, dir.from)
		go func() { out.Write(payload); out.(interface{ CloseWrite() error }).CloseWrite() }()
		in := accept(t, dir.to)
		got, err := io.ReadAll(in)
		if err != nil || !bytes.Equal(got, payload) {
			t.Fatalf("%s: read %d bytes, %v; want the 16 MiB sent", dir.name, len(got), err)
		}
		in.Close()
		out.Close()
	}
	stalled.SetWriteDeadline(time.Now())
	if err := <-blocked; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the stalled writer's error = %v, want a deadline", err)
	}
	mu.Lock()
	w := written
	mu.Unlock()
	if w != 256<<10-1 { // its window, less the "x"
		t.Errorf("the stalled stream's writer got %d bytes out, want its window of 256 KiB less 1", w)
	}
	stalled.Close()
	stalledIn.Close()
	noStreams(t, c, s)
}

func TestDeadlines(t *testing.T) {
	c, s := pair(t, false)
	st := open(t, c)
	st.Write([]byte("x"))
	in := accept(t, s)
	in.Read(make([]byte, 1))

	st.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := st.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past its deadline = %v, want os.ErrDeadlineExceeded", err)
	}
	var ne net.Error
	if _, err := st.Read(make([]byte, 1)); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Read again = %v, want a net.Error that is a timeout", err)
	}
	st.SetReadDeadline(time.Time{})
	go in.Write([]byte("y"))
	b := make([]byte, 1)
	if _, err := st.Read(b); err != nil || b[0] != 'y' {
		t.Fatalf("Read with the deadline cleared = %q, %v", b, err)
	}

	// A deadline set while a read waits wakes it.
	errc := make(chan error, 1)
	go func() { _, err := st.Read(b); errc <- err }()
	waitParked(t, 1, "select", inStreamRead)
	st.SetReadDeadline(time.Now())
	if err := <-errc; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a waiting Read after SetReadDeadline(now) = %v", err)
	}
	st.Close()
	in.Close()
	noStreams(t, c, s)
}

// TestCloseTimeout: a closed stream whose peer never closes its side is
// reset after StreamCloseTimeout, so it is not kept for ever. The peer,
// reading only after the reset, still reads all that was sent and EOF: the
// FIN came before the reset.
func TestCloseTimeout(t *testing.T) {
	cfg := DefaultConfig()
	cfg.StreamCloseTimeout = 100 * time.Millisecond
	c, s := pairWith(t, false, cfg)
	st := open(t, c)
	st.Write([]byte("x"))
	in := accept(t, s)
	st.Close()
	// The peer neither writes nor closes: after the timeout the stream is
	// reset and forgotten on both sides, though in was never closed.
	waitFor(t, "the reset", func() bool { return c.NumStreams() == 0 && s.NumStreams() == 0 })
	if got, err := io.ReadAll(in); err != nil || string(got) != "x" {
		t.Fatalf("the peer read %q, %v; want x and EOF", got, err)
	}
	if _, err := in.Write([]byte("late")); !errors.Is(err, ErrStreamReset) {
		t.Errorf("a write to the reset stream = %v, want ErrStreamReset", err)
	}
	in.Close()
}

// TestBacklogFullResets: past AcceptBacklog, new streams are reset instead
// of waiting without bound.
func TestBacklogFullResets(t *testing.T) {
	cfg := DefaultConfig()
	cfg.AcceptBacklog = 2
	c, s := pairWith(t, false, cfg)
	var sts []net.Conn
	for range 3 {
		st := open(t, c)
		st.Write([]byte("x"))
		sts = append(sts, st)
	}
	st := sts[2]
	st.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := st.Read(make([]byte, 1)); !errors.Is(err, ErrStreamReset) {
		t.Fatalf("the stream past the backlog read %v, want ErrStreamReset", err)
	}
	for range 2 {
		accept(t, s).Close()
	}
	for _, st := range sts {
		st.Close()
	}
	noStreams(t, c, s)
}

// TestPeerStreamsAreBounded: past MaxPeerStreams that the peer opened and
// are open, a new one from the peer is reset; one that ends makes room for
// the next. A session's own streams don't count against the peer's.
func TestPeerStreamsAreBounded(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxPeerStreams = 2
	c, s := pairWith(t, false, cfg)
	var all []net.Conn
	// s's own two: at c's bound, and nothing against s's.
	for range 2 {
		st := open(t, s)
		st.Write([]byte("x"))
		all = append(all, st, accept(t, c))
	}
	var sts []net.Conn
	for range 3 {
		st := open(t, c)
		st.Write([]byte("x"))
		sts = append(sts, st)
	}
	sts[2].SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := sts[2].Read(make([]byte, 1)); !errors.Is(err, ErrStreamReset) {
		t.Fatalf("the peer's third stream read %v, want ErrStreamReset", err)
	}
	first, second := accept(t, s), accept(t, s)
	all = append(all, sts[1], second)

	sts[0].Close()
	first.Close()
	waitFor(t, "the ended stream forgotten", func() bool { return s.NumStreams() == 3 })
	st := open(t, c)
	st.Write([]byte("x"))
	all = append(all, st, accept(t, s))
	for _, st := range all {
		st.Close()
	}
	noStreams(t, c, s)
}

// TestManyStreamsAreForgotten: a thousand short exchanges leave no stream
// behind on either side.
func TestManyStreamsAreForgotten(t *testing.T) {
	c, s := pair(t, true)
	s.Handle(func(st net.Conn) {
		defer st.Close()
		io.Copy(st, st)
	})
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				st, err := c.Open(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				st.Write([]byte("ping"))
				st.(interface{ CloseWrite() error }).CloseWrite()
				got, err := io.ReadAll(st)
				st.Close()
				if err != nil || string(got) != "ping" {
					t.Errorf("echo = %q, %v", got, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	noStreams(t, c, s)
}

// TestDataBeforeAResetIsRead: what the peer wrote before it reset the
// stream is still read, then the reset; as a relay, the agent passes the
// hub's last bytes (a TLS alert) on before it drops the connection.
func TestDataBeforeAResetIsRead(t *testing.T) {
	c, s := pair(t, false)
	st := open(t, c)
	st.Write([]byte("unread by the server"))
	in := accept(t, s)
	waitFor(t, "the server to have the data", func() bool {
		in := in.(*stream)
		in.mu.Lock()
		defer in.mu.Unlock()
		return len(in.chunks) > 0
	})
	in.Write([]byte("last words"))
	in.Close() // unread data, the client still writing: a reset
	got, err := io.ReadAll(st)
	if string(got) != "last words" || !errors.Is(err, ErrStreamReset) {
		t.Fatalf("the client read %q, %v; want the last words, then ErrStreamReset", got, err)
	}
	if _, err := st.Write([]byte("x")); !errors.Is(err, ErrStreamReset) {
		t.Errorf("a write after the reset = %v, want ErrStreamReset", err)
	}
	st.Close()
	noStreams(t, c, s)
}

// TestEveryWaitingReadEnds: net.Conn lets goroutines read at once. Each
// Read waiting on the stream ends with its Close or deadline, or takes its
// share of what arrives, not only the first that wakes.
func TestEveryWaitingReadEnds(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(st, in net.Conn)
		want error
	}{
		{"Close", func(st, _ net.Conn) { st.Close() }, net.ErrClosed},
		{"deadline", func(st, _ net.Conn) { st.SetReadDeadline(time.Now()) }, os.ErrDeadlineExceeded},
		{"data", func(_, in net.Conn) { in.Write([]byte("abc")) }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, s := pair(t, false)
			st := open(t, c)
			st.Write([]byte("x"))
			in := accept(t, s)
			const readers = 3
			errc := make(chan error, readers)
			for range readers {
				go func() { _, err := st.Read(make([]byte, 1)); errc <- err }()
			}
			waitParked(t, readers, "select", inStreamRead)
			tc.end(st, in)
			for i := range readers {
				select {
				case err := <-errc:
					if !errors.Is(err, tc.want) {
						t.Errorf("Read %d = %v, want %v", i, err, tc.want)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("%d of %d Reads never ended after the stream's %s", readers-i, readers, tc.name)
				}
			}
			st.Close()
			in.Close()
		})
	}
}

// TestResetEndsThePeersReadsWithAnError: a stream reset after it sent some
// data, half-closed or not, gives the peer that data and then
// ErrStreamReset, never the EOF of a stream that said all it had to say;
// both sides forget it.
func TestResetEndsThePeersReadsWithAnError(t *testing.T) {
	for _, halfClosed := range []bool{false, true} {
		c, s := pair(t, false)
		out := open(t, c)
		if _, err := out.Write([]byte("part of an answer")); err != nil {
			t.Fatal(err)
		}
		in := accept(t, s)
		if halfClosed {
			// The peer half-closed first: the reset still reaches it.
			in.(interface{ CloseWrite() error }).CloseWrite()
		}
		if err := out.(interface{ Reset() error }).Reset(); err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(in)
		if string(got) != "part of an answer" || !errors.Is(err, ErrStreamReset) {
			t.Errorf("half-closed %v: the peer read %q, %v; want what came before the reset, then %v", halfClosed, got, err, ErrStreamReset)
		}
		if _, err := out.Write([]byte("more")); err == nil {
			t.Errorf("half-closed %v: a write after Reset succeeded", halfClosed)
		}
		in.Close()
		noStreams(t, c, s)
	}
}
