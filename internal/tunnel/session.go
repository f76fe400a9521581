package tunnel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Errors a session or its streams return.
var (
	// ErrClosed is returned by Open and Accept, and by the reads and writes
	// of its streams, once the session has ended.
	ErrClosed = errors.New("tunnel: session closed")
	// ErrStreamReset is returned by a stream's reads and writes once the
	// peer has reset it: it closed the stream while data was still coming.
	ErrStreamReset = errors.New("tunnel: stream reset by the peer")
	// errProtocol wraps frames no correct peer sends; they end the session.
	errProtocol = errors.New("tunnel: protocol error")
)

// transport carries frames between the two ends: Read is the peer's frames
// as one byte stream, read only by the session's read loop; WriteFrame
// sends one frame, header and body together, and is called by one goroutine
// at a time. wsConn is the real one.
type transport interface {
	io.Reader
	WriteFrame(hdr []byte, body []byte, deadline time.Time) error
	Close() error
	LocalAddr() net.Addr
	RemoteAddr() net.Addr
}

// Session is one connection carrying streams. Its one goroutine, the read
// loop, reads frames and hands their data to streams; whoever writes to a
// stream writes the frame itself, under the session's write lock, so no
// frame passes from goroutine to goroutine on its way out. An idle session
// costs that goroutine and a few hundred bytes (decision 010).
type Session struct {
	t      transport
	cfg    Config
	client bool

	// wlock, cap 1, is held to write a frame onto the transport: one at a
	// time. A channel, not a mutex, so that a wait for it can end with a
	// stream's deadline or Close, or a context (lockWrite).
	wlock chan struct{}
	hdr   [headerSize]byte // guarded by wlock

	mu       sync.Mutex // guards the following
	streams  map[uint32]*stream
	nextID   uint32
	backlog  []*stream // opened by the peer, waiting for Accept
	peerOpen int       // streams the peer opened that are in streams
	handle   func(net.Conn)
	goAway   bool     // the peer takes no new streams
	err      error    // why the session ended; nil while it runs
	queued   []header // frames the read loop may not wait to write
	flushing bool     // a goroutine is writing queued

	// sending bounds the ReadFrom buffers filled and waiting to be sent.
	sending *gate

	grown   atomic.Int64 // what the streams' windows grew by, together
	flooded atomic.Bool  // queued reached maxQueued: the read loop ends the session

	arrived chan struct{} // cap 1: the backlog grew
	done    chan struct{} // closed when the session ends
	loop    sync.WaitGroup
	workers sync.WaitGroup // the flushes of queued, and the handlers
}

// newSession starts a session over t. Dial and Accept have checked cfg;
// its zero fields take their defaults here too, for tests that start a
// session over a transport of their own.
func newSession(t transport, cfg Config, client bool) *Session {
	s := &Session{
		t:       t,
		cfg:     cfg.withDefaults(),
		client:  client,
		nextID:  2,
		wlock:   make(chan struct{}, 1),
		arrived: make(chan struct{}, 1),
		done:    make(chan struct{}),
	}
	if client {
		s.nextID = 1
	}
	s.sending = newGate(maxSending, s.done, s.ended)
	s.loop.Add(1)
	go s.readLoop()
	return s
}

// maxSending is how many frames' buffers a session's ReadFrom calls fill
// before one is sent: 4 MiB of frames of maxFrame, a queue the connection
// never runs dry of, however many streams have bytes to send.
const maxSending = 16

// Open starts a new stream to the peer. The stream may be written to at
// once; the peer learns of it with the first frame.
func (s *Session) Open(ctx context.Context) (net.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return nil, err
	}
	if s.goAway {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: the peer takes no new streams", ErrClosed)
	}
	id := s.nextID
	if id > 1<<32-3 {
		s.mu.Unlock()
		return nil, errors.New("tunnel: stream IDs used up")
	}
	s.nextID += 2
	st := newStream(s, id)
	s.track(st)
	s.mu.Unlock()
	// Open the stream and enlarge its window in one frame, as yamux does.
	if err := st.sendWindow(ctx.Done(), flagSYN); err != nil {
		// The peer never heard of it.
		s.forget(st)
		if errors.Is(err, errWoken) {
			return nil, ctx.Err()
		}
		return nil, err
	}
	return st, nil
}

// Accept waits for the peer to open a stream.
func (s *Session) Accept(ctx context.Context) (net.Conn, error) {
	for {
		s.mu.Lock()
		if len(s.backlog) > 0 {
			st := s.backlog[0]
			s.backlog[0] = nil
			s.backlog = s.backlog[1:]
			if len(s.backlog) == 0 {
				s.backlog = nil
			} else {
				// arrived holds one signal: two streams that came while two
				// Accepts were on their way to waiting left one, and the
				// second Accept waits for this.
				notify(s.arrived)
			}
			s.mu.Unlock()
			if err := st.sendWindow(ctx.Done(), flagACK); err != nil {
				if errors.Is(err, errWoken) {
					// Nobody will have it: reset it, as yamux does.
					st.abandon()
					s.queue(header{typ: typeWindow, flags: flagRST, stream: st.id})
					return nil, ctx.Err()
				}
				return nil, err
			}
			return st, nil
		}
		err := s.err
		s.mu.Unlock()
		if err != nil {
			return nil, err
		}
		select {
		case <-s.arrived:
		case <-s.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Handle has handle called, in a goroutine of its own, with each stream the
// peer opens from now on, and with any waiting for Accept. It replaces an
// accept loop and its goroutine. Close waits for the handlers to return (a
// session's streams all fail once it ends), so a handler must not call
// Close itself.
func (s *Session) Handle(handle func(net.Conn)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handle = handle
	for _, st := range s.backlog {
		s.startHandler(st)
	}
	s.backlog = nil
}

// startHandler runs the handler on st. s.mu is held.
func (s *Session) startHandler(st *stream) {
	if s.err != nil {
		return
	}
	s.workers.Add(1)
	go func() {
		defer s.workers.Done()
		if err := st.sendWindow(nil, flagACK); err != nil {
			return
		}
		s.handle(st)
	}()
}

// Done is closed when the session ends, from either side.
func (s *Session) Done() <-chan struct{} { return s.done }

// NumStreams is the number of streams open now.
func (s *Session) NumStreams() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.streams)
}

// Close ends every stream and the connection at once. It may be called more
// than once, and returns once the session's goroutines are gone.
func (s *Session) Close() error {
	s.end(ErrClosed)
	s.loop.Wait()
	s.workers.Wait()
	return nil
}

// end ends the session, once, with err as what Open, Accept and the
// streams return from now on. Every waiter watches done.
func (s *Session) end(err error) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	if !errors.Is(err, ErrClosed) {
		err = fmt.Errorf("%w: %w", ErrClosed, err)
	}
	s.err = err
	streams := s.streams
	for _, st := range streams {
		st.stopTimers()
	}
	s.streams, s.backlog, s.queued = nil, nil, nil
	close(s.done)
	s.mu.Unlock()
	// After done, so that a stream's onReadable sees the end; and without
	// s.mu, which a stream's lock is never taken under when done is closed.
	for _, st := range streams {
		st.tellEnded()
	}
	s.t.Close()
}

// track adds st to the open streams. s.mu is held.
func (s *Session) track(st *stream) {
	if s.streams == nil {
		s.streams = make(map[uint32]*stream)
	}
	s.streams[st.id] = st
}

// forget drops st once both sides are done with it, and gives its window's
// growth back to the session: by then the stream is over, and its window
// grows no more. A stream the peer reset before it was accepted leaves the
// backlog too, with what it holds: it no longer counts against
// MaxPeerStreams, and nobody would read it.
func (s *Session) forget(st *stream) {
	s.mu.Lock()
	forgotten := s.streams[st.id] == st
	unaccepted := false
	if forgotten {
		delete(s.streams, st.id)
		if s.openedByPeer(st.id) {
			s.peerOpen--
			if i := slices.Index(s.backlog, st); i >= 0 {
				s.backlog = slices.Delete(s.backlog, i, i+1)
				unaccepted = true
			}
		}
	}
	s.mu.Unlock()
	if forgotten {
		st.mu.Lock()
		s.grown.Add(-int64(st.grown))
		st.grown = 0
		if unaccepted {
			st.dropChunks()
		}
		st.mu.Unlock()
	}
}

// openedByPeer says whether stream id is one the peer opened: a client's
// streams have odd numbers, a server's even.
func (s *Session) openedByPeer(id uint32) bool { return (id%2 == 1) != s.client }

// growBy takes up to want of the session's room for growth, and returns
// what it took.
func (s *Session) growBy(want uint32) uint32 {
	for {
		had := s.grown.Load()
		n := min(int64(want), int64(s.cfg.MaxWindowGrowth)-had)
		if n <= 0 {
			return 0
		}
		if s.grown.CompareAndSwap(had, had+n) {
			return uint32(n)
		}
	}
}

// write sends one frame. An error ends the session: the connection is
// broken or the peer stopped reading for longer than WriteTimeout.
func (s *Session) write(h header, body []byte) error {
	if err := s.lockWrite(nil); err != nil {
		return err
	}
	defer s.unlockWrite()
	return s.writeLocked(h, body)
}

// errWoken: a wait for the write lock ended because its caller was woken.
var errWoken = errors.New("tunnel: woken while waiting to write")

// lockWrite takes the write lock. It returns errWoken instead if wake
// fires first, and the session's error if the session ends. The lock is
// held for as long as a frame takes to write, up to WriteTimeout on a
// connection that has stopped taking bytes: a stream's deadline, its Close
// or a context must not wait for that (wake).
func (s *Session) lockWrite(wake <-chan struct{}) error {
	select {
	case s.wlock <- struct{}{}:
		return nil
	case <-s.done:
		return s.ended()
	case <-wake:
		return errWoken
	}
}

func (s *Session) unlockWrite() { <-s.wlock }

// writeLocked is write with the write lock held.
func (s *Session) writeLocked(h header, body []byte) error {
	select {
	case <-s.done:
		return s.ended()
	default:
	}
	h.encode(&s.hdr)
	if err := s.t.WriteFrame(s.hdr[:], body, time.Now().Add(s.cfg.WriteTimeout)); err != nil {
		s.end(fmt.Errorf("write: %w", err))
		return s.ended()
	}
	return nil
}

// ended is the error the session ended with.
func (s *Session) ended() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// queue sends a frame the read loop decided on (a reset, a ping's answer,
// a grant) without waiting for the write lock: the read loop never waits on
// a write, so two peers each writing to the other cannot both stall
// reading. A Write that runs out of window queues its waiting frame too.
// One goroutine at a time writes what is queued, and only while there is
// some.
func (s *Session) queue(h header) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queueLocked(h)
}

// maxQueued bounds the frames waiting in queued. A peer that keeps reading
// leaves a few per stream at most; only one that sends what must be
// answered (pings, opens past the backlog) and reads nothing gets here,
// and the read loop then ends the session, as net/http2 does past its
// maxQueuedControlFrames.
const maxQueued = 1 << 14

// queueLocked is queue with s.mu held.
func (s *Session) queueLocked(h header) {
	if s.err != nil {
		return
	}
	if len(s.queued) >= maxQueued {
		s.flooded.Store(true)
		return
	}
	s.queued = append(s.queued, h)
	if s.flushing {
		return
	}
	s.flushing = true
	s.workers.Add(1)
	go s.flush()
}

func (s *Session) flush() {
	defer s.workers.Done()
	for {
		s.mu.Lock()
		q := s.queued
		s.queued = nil
		if len(q) == 0 {
			s.flushing = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		for _, h := range q {
			if s.write(h, nil) != nil {
				s.mu.Lock()
				s.flushing = false
				s.mu.Unlock()
				return
			}
		}
	}
}

// readLoop reads frames until the connection fails or the session ends.
func (s *Session) readLoop() {
	defer s.loop.Done()
	var b [headerSize]byte
	for {
		if _, err := io.ReadFull(s.t, b[:]); err != nil {
			s.end(err)
			return
		}
		h, err := decodeHeader(&b)
		if err == nil {
			err = s.dispatch(h)
		}
		if err == nil && s.flooded.Load() {
			err = fmt.Errorf("%w: %d frames wait for a peer that reads none of them", errProtocol, maxQueued)
		}
		if err != nil {
			s.end(err)
			return
		}
	}
}

// dispatch handles one frame; for a data frame it reads the body too.
func (s *Session) dispatch(h header) error {
	switch h.typ {
	case typePing:
		if h.flags&flagSYN != 0 {
			s.queue(header{typ: typePing, flags: flagACK, length: h.length})
		}
		return nil
	case typeGoAway:
		s.mu.Lock()
		s.goAway = true
		s.mu.Unlock()
		return nil
	}
	if h.stream == 0 {
		return fmt.Errorf("%w: %s on stream 0", errProtocol, h)
	}
	st, err := s.streamFor(h)
	if err != nil {
		return err
	}
	if h.typ == typeData && h.length > 0 {
		if err := s.receive(st, h); err != nil {
			return err
		}
	}
	if st == nil {
		return nil
	}
	if h.typ == typeWindow {
		st.grow(h.length)
		if h.flags&flagWaiting != 0 {
			if grant := st.peerWaits(); grant > 0 {
				// The read loop never waits on a write.
				s.queue(header{typ: typeWindow, stream: st.id, length: grant})
			}
		}
	}
	if h.flags&flagFIN != 0 {
		st.peerFinished()
	}
	if h.flags&flagRST != 0 {
		st.peerReset()
	}
	return nil
}

// receive reads a data frame's body into st. Data for a stream that is
// gone is read and dropped; data for one closed here resets it, so its
// writer stops.
func (s *Session) receive(st *stream, h header) error {
	verdict := admitGone
	if st != nil {
		verdict = st.admit(h.length)
	}
	switch verdict {
	case admitOverflow:
		return fmt.Errorf("%w: stream %d sent %d bytes past its window", errProtocol, h.stream, h.length)
	case admitClosed:
		st.abandon()
		s.queue(header{typ: typeWindow, flags: flagRST, stream: h.stream})
	case admitFinished:
		// The peer is broken on this stream alone: it ends, as a reset
		// does, and what came before the FIN is still read, then EOF.
		st.peerReset()
		s.queue(header{typ: typeWindow, flags: flagRST, stream: h.stream})
	case admitOK:
		// Read in pieces of at most maxFrame, the most Tether sends in one
		// frame, so a header that claims a whole window of 1 MiB or more,
		// then sends nothing, holds one piece (hashicorp/yamux sends up to
		// its window in one frame).
		for left := h.length; left > 0; {
			n := min(left, maxFrame)
			buf := getChunk(int(n))
			if _, err := io.ReadFull(s.t, *buf); err != nil {
				putChunk(buf)
				return err
			}
			st.receive(buf)
			left -= n
		}
		return nil
	}
	_, err := io.CopyN(io.Discard, s.t, int64(h.length))
	return err
}

// streamFor finds the stream a frame is for, or opens it when the frame
// has SYN. It returns nil, nil for a stream already forgotten: frames in
// flight when a stream ended are dropped.
func (s *Session) streamFor(h header) (*stream, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return nil, s.err
	}
	st := s.streams[h.stream]
	if h.flags&flagSYN == 0 {
		return st, nil
	}
	if st != nil {
		return nil, fmt.Errorf("%w: stream %d opened twice", errProtocol, h.stream)
	}
	if !s.openedByPeer(h.stream) {
		return nil, fmt.Errorf("%w: the peer opened stream %d, which is ours to number", errProtocol, h.stream)
	}
	if s.handle == nil && len(s.backlog) >= s.cfg.AcceptBacklog ||
		s.cfg.MaxPeerStreams > 0 && s.peerOpen >= s.cfg.MaxPeerStreams {
		s.queueLocked(header{typ: typeWindow, flags: flagRST, stream: h.stream})
		return nil, nil
	}
	st = newStream(s, h.stream)
	s.track(st)
	s.peerOpen++
	if s.handle != nil {
		s.startHandler(st)
		return st, nil
	}
	s.backlog = append(s.backlog, st)
	select {
	case s.arrived <- struct{}{}:
	default:
	}
	return st, nil
}

// LocalAddr and RemoteAddr are the connection's.
func (s *Session) LocalAddr() net.Addr  { return s.t.LocalAddr() }
func (s *Session) RemoteAddr() net.Addr { return s.t.RemoteAddr() }
