package tunnel

import (
	"bytes"
	"errors"
	"io"
	"math"
	"net"
	"runtime"
	"testing"
	"time"
)

// connTransport carries frames over a plain connection, for tests that
// play the peer byte by byte.
type connTransport struct{ net.Conn }

func (c connTransport) WriteFrame(hdr, body []byte, deadline time.Time) error {
	c.SetWriteDeadline(deadline)
	b := net.Buffers{hdr, body}
	_, err := b.WriteTo(c.Conn)
	return err
}

// rawPeer starts a session (the client, so the peer's streams are even) on
// one end of a pipe and returns the other end, whose output is drained.
func rawPeer(t *testing.T) (*Session, net.Conn) {
	t.Helper()
	return rawPeerWith(t, DefaultConfig())
}

// rawPeerWith is rawPeer for a session with cfg.
func rawPeerWith(t *testing.T, cfg Config) (*Session, net.Conn) {
	t.Helper()
	ours, peer := net.Pipe()
	s := newSession(connTransport{ours}, cfg, true)
	t.Cleanup(func() { s.Close(); peer.Close() })
	return s, peer
}

// framesFrom reads the frames a session writes to peer, dropping data
// frames' bodies, and sends their headers on until peer closes.
func framesFrom(peer net.Conn) <-chan header {
	out := make(chan header, 64)
	go func() {
		defer close(out)
		for {
			h, err := readFrame(peer)
			if err != nil {
				return
			}
			out <- h
		}
	}()
	return out
}

// readFrame reads one frame from r, dropping a data frame's body.
func readFrame(r io.Reader) (header, error) {
	var b [headerSize]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return header{}, err
	}
	h, err := decodeHeader(&b)
	if err == nil && h.typ == typeData {
		_, err = io.CopyN(io.Discard, r, int64(h.length))
	}
	return h, err
}

// next returns the next frame the session wrote, failing after 5 s.
func next(t *testing.T, frames <-chan header) header {
	t.Helper()
	select {
	case h, ok := <-frames:
		if !ok {
			t.Fatal("the session's output ended")
		}
		return h
	case <-time.After(5 * time.Second):
		t.Fatal("no frame from the session in 5 s")
	}
	return header{}
}

func frame(h header, body ...byte) []byte {
	var b [headerSize]byte
	h.encode(&b)
	return append(b[:], body...)
}

// TestProtocolErrorsEndTheSession: frames no correct peer sends end the
// session with an error that says so.
func TestProtocolErrorsEndTheSession(t *testing.T) {
	open := frame(header{typ: typeWindow, flags: flagSYN, stream: 2})
	for _, tc := range []struct {
		name   string
		frames [][]byte
	}{
		{"unknown version", [][]byte{{1, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0}}},
		{"unknown type", [][]byte{frame(header{typ: 4, stream: 2})}},
		{"data on stream 0", [][]byte{frame(header{typ: typeData, stream: 0, length: 1}, 'x')}},
		{"opened twice", [][]byte{open, open}},
		{"our stream number", [][]byte{frame(header{typ: typeWindow, flags: flagSYN, stream: 3})}},
		{"past the window", [][]byte{open, frame(header{typ: typeData, stream: 2, length: initialWindow + 1})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, peer := rawPeer(t)
			go io.Copy(io.Discard, peer)
			for _, f := range tc.frames {
				peer.SetWriteDeadline(time.Now().Add(5 * time.Second))
				if _, err := peer.Write(f); err != nil {
					break // the session ended before reading it all
				}
			}
			select {
			case <-s.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("the session still runs")
			}
			if err := s.ended(); !errors.Is(err, errProtocol) || !errors.Is(err, ErrClosed) {
				t.Errorf("the session ended with %v, want a protocol error", err)
			}
		})
	}
}

// TestFramesForGoneStreamsAreDropped: data for a stream that has ended, a
// ping and a goaway are handled without ending the session.
func TestFramesForGoneStreamsAreDropped(t *testing.T) {
	s, peer := rawPeer(t)
	frames := framesFrom(peer)
	for _, f := range [][]byte{
		frame(header{typ: typeData, stream: 8, length: 3}, 'a', 'b', 'c'),
		frame(header{typ: typeWindow, flags: flagFIN, stream: 8}),
		frame(header{typ: typePing, flags: flagSYN, length: 42}),
	} {
		peer.Write(f)
	}
	if h := next(t, frames); h != (header{typ: typePing, flags: flagACK, length: 42}) {
		t.Fatalf("answer to a ping = %s, want its ACK", h)
	}
	peer.Write(frame(header{typ: typeGoAway}))
	waitFor(t, "the goaway", func() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.goAway })
	if _, err := s.Open(t.Context()); !errors.Is(err, ErrClosed) {
		t.Errorf("Open after the peer's goaway = %v, want ErrClosed", err)
	}
	select {
	case <-s.Done():
		t.Fatalf("the session ended: %v", s.ended())
	default:
	}
}

// TestPeerThatReadsNothingEndsTheSession: a peer that sends pings, each
// to be answered, and reads none of the answers makes the session queue
// them only up to maxQueued, then end.
func TestPeerThatReadsNothingEndsTheSession(t *testing.T) {
	s, peer := rawPeer(t) // nothing reads peer: the first answer's write stalls
	burst := bytes.Repeat(frame(header{typ: typePing, flags: flagSYN, length: 7}), 1000)
	for range 2 * maxQueued / 1000 {
		peer.SetWriteDeadline(time.Now().Add(5 * time.Second))
		if _, err := peer.Write(burst); err != nil {
			break // the session ended
		}
	}
	select {
	case <-s.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the session still runs")
	}
	if err := s.ended(); !errors.Is(err, errProtocol) {
		t.Errorf("the session ended with %v, want a protocol error", err)
	}
	s.mu.Lock()
	n := len(s.queued)
	s.mu.Unlock()
	if n > maxQueued {
		t.Errorf("%d frames queued, want at most %d", n, maxQueued)
	}
}

// TestDataFrameHoldsAPiece: a data frame's header claiming a window of
// 1 MiB, with nothing after it, makes the read loop hold a piece of
// maxFrame, not the length claimed.
func TestDataFrameHoldsAPiece(t *testing.T) {
	const sessions = 8
	heap := func() int64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	before := heap()
	var keep []net.Conn
	for range sessions {
		s, peer := rawPeer(t)
		framesFrom(peer)
		peer.Write(frame(header{typ: typeWindow, flags: flagSYN, stream: 2}))
		keep = append(keep, accept(t, s)) // its window is StreamWindow now
		// net.Pipe: Write returns once the read loop has taken the byte.
		peer.Write(frame(header{typ: typeData, stream: 2, length: 1 << 20}, 'x'))
	}
	held := (heap() - before) / sessions
	runtime.KeepAlive(keep)
	if held > maxFrame+64<<10 {
		t.Errorf("a frame's header and one byte hold %d KiB per session, want at most a piece of %d KiB", held>>10, maxFrame>>10)
	}
}

// fuzzTransport plays a peer that sends data and then hangs up; what the
// session writes is dropped.
type fuzzTransport struct{ r *bytes.Reader }

func (f fuzzTransport) Read(p []byte) (int, error)                 { return f.r.Read(p) }
func (f fuzzTransport) WriteFrame([]byte, []byte, time.Time) error { return nil }
func (f fuzzTransport) Close() error                               { return nil }
func (f fuzzTransport) LocalAddr() net.Addr                        { return nil }
func (f fuzzTransport) RemoteAddr() net.Addr                       { return nil }

// FuzzSession feeds a session arbitrary frames from its peer. Whatever
// they are, the session must not panic, must end when they run out, and
// Close must return with every stream handler done.
func FuzzSession(f *testing.F) {
	open := frame(header{typ: typeWindow, flags: flagSYN, stream: 2, length: 1 << 10})
	f.Add(open)
	f.Add(append(append(open, frame(header{typ: typeData, stream: 2, length: 3}, 'a', 'b', 'c')...), frame(header{typ: typeWindow, flags: flagFIN, stream: 2})...))
	f.Add(append(open, frame(header{typ: typeWindow, flags: flagRST, stream: 2})...))
	f.Add(frame(header{typ: typePing, flags: flagSYN, length: 7}))
	f.Add(frame(header{typ: typeGoAway, length: 1}))
	f.Add(append(open, frame(header{typ: typeData, flags: flagFIN, stream: 2, length: 2}, 'h', 'i')...))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg := DefaultConfig()
		cfg.AcceptBacklog = 4
		s := newSession(fuzzTransport{bytes.NewReader(data)}, cfg, true)
		s.Handle(func(st net.Conn) {
			defer st.Close()
			st.SetDeadline(time.Now().Add(time.Second))
			io.Copy(io.Discard, st)
			st.Write([]byte("x"))
		})
		select {
		case <-s.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the session still runs after its input ran out")
		}
		s.Close()
	})
}

// TestDataAfterFINIsNotRead: the peer's FIN says it sent all it will; data
// it sends after that is no part of the stream, and a Read never returns it,
// before or after the EOF.
func TestDataAfterFINIsNotRead(t *testing.T) {
	s, peer := rawPeer(t)
	frames := framesFrom(peer)
	peer.Write(frame(header{typ: typeData, flags: flagSYN, stream: 2, length: 1}, 'a'))
	in := accept(t, s)
	for _, f := range [][]byte{
		frame(header{typ: typeWindow, flags: flagFIN, stream: 2}),
		frame(header{typ: typeData, stream: 2, length: 1}, 'b'),
		frame(header{typ: typePing, flags: flagSYN, length: 1}),
	} {
		peer.Write(f)
	}
	for h := next(t, frames); h.typ != typePing; h = next(t, frames) {
	} // the read loop is past the data
	in.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(in)
	if err != nil || string(got) != "a" {
		t.Fatalf("read %q, %v; want what came before the FIN, and EOF", got, err)
	}
	if n, err := in.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("Read after EOF = %d, %v; want EOF again", n, err)
	}
	in.Close()
	if err := s.ended(); err != nil {
		t.Errorf("the session ended: %v", err)
	}
}

// TestResetBeforeAcceptHoldsNothing: a stream the peer opens, fills and
// resets before it is accepted is over, and costs nothing: the peer can't
// make the backlog hold the data of more streams than MaxPeerStreams by
// resetting each one it fills.
func TestResetBeforeAcceptHoldsNothing(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxPeerStreams = 2
	s, peer := rawPeerWith(t, cfg)
	frames := framesFrom(peer)
	const streams, size = 8, 64 << 10
	for i := range streams {
		id := uint32(2 + 2*i)
		peer.Write(frame(header{typ: typeData, flags: flagSYN, stream: id, length: size}, make([]byte, size)...))
		peer.Write(frame(header{typ: typeWindow, flags: flagRST, stream: id}))
	}
	peer.Write(frame(header{typ: typePing, flags: flagSYN, length: 1}))
	for h := next(t, frames); h.typ != typePing; h = next(t, frames) {
	} // the read loop is past the resets
	s.mu.Lock()
	held := 0
	for _, st := range s.backlog {
		st.mu.Lock()
		held += st.unreadLocked()
		st.mu.Unlock()
	}
	waiting := len(s.backlog)
	s.mu.Unlock()
	if held > 0 || waiting > 0 {
		t.Errorf("%d streams reset before Accept wait for it, holding %d KiB", waiting, held>>10)
	}
}

// TestWindowGrantsDontWrap: a peer's grants past what a uint32 holds leave
// the send window at its most, not wrapped round to less than it was.
func TestWindowGrantsDontWrap(t *testing.T) {
	s, peer := rawPeer(t)
	frames := framesFrom(peer)
	peer.Write(frame(header{typ: typeData, flags: flagSYN, stream: 2, length: 1}, 'a'))
	in := accept(t, s).(*stream)
	for range 2 {
		peer.Write(frame(header{typ: typeWindow, stream: 2, length: math.MaxUint32 - 7}))
	}
	peer.Write(frame(header{typ: typePing, flags: flagSYN, length: 1}))
	for h := next(t, frames); h.typ != typePing; h = next(t, frames) {
	} // the read loop is past the grants
	in.mu.Lock()
	win := in.sendWin
	in.mu.Unlock()
	if win != math.MaxUint32 {
		t.Errorf("send window %d after two grants of %d; want %d", win, uint32(math.MaxUint32-7), uint32(math.MaxUint32))
	}
}
