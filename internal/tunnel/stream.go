package tunnel

import (
	"errors"
	"io"
	"math"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// maxFrame is the most data one frame carries. The agent relays in reads of
// 256 KiB (decision 008); a frame holds the connection for as long as it
// takes to write, so heartbeats and other streams wait at most that long.
const maxFrame = 256 << 10

// stream is one stream of a session, a net.Conn. Its receive side holds the
// chunks the read loop handed over; the window says how much more the peer
// may send, so the read loop never waits for a stream's reader.
type stream struct {
	s  *Session
	id uint32

	wlock sync.Mutex // one Write at a time, so its frames keep their order

	mu       sync.Mutex // guards the following
	chunks   []*[]byte  // received and not yet read; chunks[0][off:] is next
	off      int
	recvWin  uint32 // what the peer may still send
	credit   uint32 // read and not yet granted back to the peer
	sendWin  uint32 // what we may still send
	window   uint32 // the receive window's size: StreamWindow, or more once grown
	grown    uint32 // what window grew by, taken from the session's MaxWindowGrowth
	waiting  bool   // Write told the peer it waits for window, and none came since
	finSent  bool   // we will write no more
	finRecv  bool   // the peer will write no more
	closed   bool   // Close was called: no more reads either
	reset    bool   // over at once, by either side
	gone     bool   // the session forgot it
	rdl, wdl time.Time
	rtimer   *time.Timer
	wtimer   *time.Timer
	ctimer   *time.Timer   // resets a closed stream the peer never finishes
	readable chan struct{} // cap 1: data, an end, or a deadline
	writable chan struct{} // cap 1: window, an end, or a deadline
	// peerWaited: the peer said it waits for window while the reader here
	// was behind, and no data came since. The reader may yet catch up
	// before any can, and the window grows then (peerWaits).
	peerWaited bool
	// onReadable, when set, is called with mu held each time the read loop
	// gives the stream something to read: data, the peer's end, or the
	// session's (OnReadable).
	onReadable func()
	// While WriteTo runs with a socket, sink is that socket: the read loop
	// writes data straight into it when nothing is waiting to go first and
	// the socket takes it without waiting (direct.go).
	sink     syscall.RawConn
	draining int   // bytes WriteTo took and is writing: the read loop queues
	sunk     int64 // what the read loop wrote into sink
	// source, while ReadFrom reads one that takes deadlines, is that
	// reader: the stream's end (Close, a reset, the session's end) puts its
	// read deadline in the past, so a read waiting on an idle source
	// returns (readfrom.go).
	source readDeadliner
}

// OnReadable has f called whenever the stream conn, one of a session's,
// gets something for Read: data, the peer's FIN or reset, or the end of
// the session; and once now if it already has. f is called from the
// session's read loop with the stream's lock held, so it must not block
// or use conn; it lets a caller start a goroutine to read only when there
// is something to read, instead of parking one on Read. A nil f stops the
// calls. It returns false, and does nothing, for a conn that is not a stream
// of a session.
func OnReadable(conn net.Conn, f func()) bool {
	st, ok := conn.(*stream)
	if !ok {
		return false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.onReadable = f
	if f != nil && st.readyLocked() {
		f()
	}
	return true
}

// Ready reports whether a Read of conn, a stream of a session, would return
// without waiting: it has data, or an error to return.
func Ready(conn net.Conn) bool {
	st, ok := conn.(*stream)
	if !ok {
		return false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.readyLocked()
}

// readyLocked is Ready with st.mu held.
func (st *stream) readyLocked() bool {
	return len(st.chunks) > 0 || st.closed || st.reset || st.finRecv || st.sessionEnded() || expired(st.rdl)
}

// readableLocked wakes a waiting Read, and calls onReadable. st.mu is held.
func (st *stream) readableLocked() {
	notify(st.readable)
	if st.onReadable != nil {
		st.onReadable()
	}
}

// newStream makes stream id of s, with the window every stream starts
// with on both sides (the peer learns of a larger one from sendWindow).
func newStream(s *Session, id uint32) *stream {
	return &stream{
		s:        s,
		id:       id,
		recvWin:  initialWindow,
		sendWin:  initialWindow,
		window:   max(s.cfg.StreamWindow, initialWindow),
		readable: make(chan struct{}, 1),
		writable: make(chan struct{}, 1),
	}
}

func notify(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// StreamID numbers the stream within its session, for logs.
func (st *stream) StreamID() uint32 { return st.id }

// sendWindow opens or acknowledges the stream with a window frame that
// enlarges the peer's window to the configured size. If wake fires while
// it waits to write, it gives up with errWoken, and nothing was sent.
func (st *stream) sendWindow(wake <-chan struct{}, flags uint16) error {
	if err := st.s.lockWrite(wake); err != nil {
		return err
	}
	defer st.s.unlockWrite()
	st.mu.Lock()
	delta := uint32(0)
	if w := st.s.cfg.StreamWindow; w > initialWindow {
		delta = w - initialWindow
	}
	st.recvWin += delta
	st.mu.Unlock()
	return st.s.writeLocked(header{typ: typeWindow, flags: flags, stream: st.id, length: delta}, nil)
}

func (st *stream) Read(p []byte) (int, error) {
	for {
		st.mu.Lock()
		if len(st.chunks) > 0 && len(p) > 0 {
			n := st.take(p)
			grant := st.consumedLocked(n)
			st.passReadableLocked()
			st.mu.Unlock()
			if grant > 0 {
				// Queued: a Read that has its data returns it, instead
				// of waiting behind other streams' frames to grant.
				st.s.queue(header{typ: typeWindow, stream: st.id, length: grant})
			}
			return n, nil
		}
		err := st.readErr()
		wait := st.readable
		if err != nil {
			st.passReadableLocked()
		}
		st.mu.Unlock()
		if err != nil || len(p) == 0 {
			return 0, err
		}
		select {
		case <-wait:
		case <-st.s.done:
		}
	}
}

// passReadableLocked leaves readable notified while a Read would not wait:
// a notification wakes one Read, and net.Conn lets goroutines read at
// once, so the one that wakes passes it on to the next. st.mu is held.
func (st *stream) passReadableLocked() {
	if st.readyLocked() {
		notify(st.readable)
	}
}

// consumedLocked counts n bytes as read, and returns how much window to
// grant back to the peer now: nothing until half the window is read, so
// window frames stay few. st.mu is held.
func (st *stream) consumedLocked(n int) (grant uint32) {
	st.credit += uint32(n)
	if st.credit >= st.window/2 && !st.finRecv {
		grant, st.credit = st.credit, 0
		st.recvWin += grant
	}
	if st.peerWaited {
		grant += st.growLocked()
	}
	return grant
}

// take copies buffered data into p. st.mu is held.
func (st *stream) take(p []byte) int {
	n := 0
	for n < len(p) && len(st.chunks) > 0 {
		c := *st.chunks[0]
		k := copy(p[n:], c[st.off:])
		n += k
		st.off += k
		if st.off == len(c) {
			putChunk(st.chunks[0])
			st.chunks[0] = nil
			st.chunks = st.chunks[1:]
			st.off = 0
		}
	}
	if len(st.chunks) == 0 {
		st.chunks = nil
	}
	return n
}

// readErr says why a read with nothing buffered can't wait. st.mu is held.
// A FIN that came before a reset still ends the reads with EOF: all the
// peer sent has arrived. (A stream closed here is reset once
// StreamCloseTimeout passes without the peer's FIN, and the peer may not
// have read its own last bytes and FIN by then.)
func (st *stream) readErr() error {
	switch {
	case st.closed:
		return net.ErrClosed
	case st.finRecv:
		return io.EOF
	case st.reset:
		return ErrStreamReset
	case st.sessionEnded():
		return st.s.ended()
	case expired(st.rdl):
		return os.ErrDeadlineExceeded
	}
	return nil
}

func (st *stream) sessionEnded() bool {
	select {
	case <-st.s.done:
		return true
	default:
		return false
	}
}

func expired(deadline time.Time) bool {
	return !deadline.IsZero() && !time.Now().Before(deadline)
}

func (st *stream) Write(p []byte) (int, error) {
	st.wlock.Lock()
	defer st.wlock.Unlock()
	total := 0
	for len(p) > 0 {
		wait, err := st.awaitWindow()
		if err != nil {
			return total, err
		}
		n, err := st.writeFrame(wait, p)
		if errors.Is(err, errWoken) {
			continue
		}
		if err != nil {
			return total, err
		}
		total += n
		p = p[n:]
	}
	return total, nil
}

// awaitWindow waits until the stream may send, telling the peer once that
// it waits, and returns the channel that says the window changed. It
// returns why the stream can't send, if it can't.
func (st *stream) awaitWindow() (<-chan struct{}, error) {
	for {
		st.mu.Lock()
		if err := st.writeErr(); err != nil {
			st.mu.Unlock()
			return nil, err
		}
		wait := st.writable
		if st.sendWin > 0 {
			st.mu.Unlock()
			return wait, nil
		}
		tell := !st.waiting
		st.waiting = true
		st.mu.Unlock()
		if tell {
			// Queued, not written here: a Write waiting for window
			// waits on nothing else, so its deadline and Close still
			// end it at once.
			st.s.queue(header{typ: typeWindow, flags: flagWaiting, stream: st.id})
		}
		select {
		case <-wait:
		case <-st.s.done:
		}
	}
}

// sendable is what the window lets the stream send now.
func (st *stream) sendable() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return int(st.sendWin)
}

// writeFrame writes one data frame of what p the window takes, once it
// has the session's write lock. While it waits for that, behind other
// streams' frames, its deadline, Close and a reset still end the Write:
// wake fires, and it returns errWoken for Write to look again. The state
// is looked at, and the window taken, under the write lock, so a FIN or
// reset that Close writes after it never goes out ahead of this frame.
func (st *stream) writeFrame(wake <-chan struct{}, p []byte) (int, error) {
	if err := st.s.lockWrite(wake); err != nil {
		return 0, err
	}
	defer st.s.unlockWrite()
	st.mu.Lock()
	if err := st.writeErr(); err != nil {
		st.mu.Unlock()
		return 0, err
	}
	n := min(uint32(len(p)), st.sendWin, maxFrame)
	st.sendWin -= n
	st.mu.Unlock()
	if n == 0 {
		return 0, errWoken // no window after all: Write waits for it
	}
	if err := st.s.writeLocked(header{typ: typeData, stream: st.id, length: n}, p[:n]); err != nil {
		return 0, err
	}
	return int(n), nil
}

// writeErr says why a write can't go on. st.mu is held.
func (st *stream) writeErr() error {
	switch {
	case st.closed || st.finSent:
		return net.ErrClosed
	case st.reset:
		return ErrStreamReset
	case st.sessionEnded():
		return st.s.ended()
	case expired(st.wdl):
		return os.ErrDeadlineExceeded
	}
	return nil
}

// The read loop's verdicts on a data frame.
const (
	admitOK       = iota
	admitGone     // no such stream: drop the data
	admitClosed   // closed here: drop the data and reset the stream
	admitFinished // after the peer's FIN: drop the data and reset the stream
	admitOverflow // more than the window: the peer is broken
)

// admit decides whether a data frame of n bytes may be buffered, and if so
// takes it from the window.
func (st *stream) admit(n uint32) int {
	st.mu.Lock()
	defer st.mu.Unlock()
	switch {
	case st.closed || st.reset:
		return admitClosed
	case st.finRecv:
		return admitFinished
	case n > st.recvWin:
		return admitOverflow
	}
	st.recvWin -= n
	st.peerWaited = false // it no longer waits: whether the reader kept up is the next wait's to say
	return admitOK
}

// receive buffers a data frame's body for Read, or writes it straight to
// WriteTo's socket when that can be done at once.
func (st *stream) receive(buf *[]byte) {
	st.mu.Lock()
	if st.closed || st.reset {
		st.mu.Unlock()
		putChunk(buf)
		return
	}
	if st.sink != nil && len(st.chunks) == 0 && st.draining == 0 {
		n := writeNow(st.sink, *buf)
		st.sunk += int64(n)
		grant := st.consumedLocked(n)
		if n < len(*buf) {
			st.chunks, st.off = append(st.chunks, buf), n
			st.readableLocked()
		} else {
			putChunk(buf)
		}
		st.mu.Unlock()
		if grant > 0 {
			// The read loop never waits on a write.
			st.s.queue(header{typ: typeWindow, stream: st.id, length: grant})
		}
		return
	}
	st.bufferLocked(buf)
	st.readableLocked()
	st.mu.Unlock()
}

// bufferLocked adds buf to what waits to be read. A reader that keeps up
// finds nothing waiting, and takes buf as it came. Behind one, buf is
// copied into the last chunk's room, then into chunks of 64 KiB, each
// filled before the next: a reader that is behind holds what the window
// let in and at most one chunk's room more. Kept as they came, frames of
// 70 KiB in chunks of 256 KiB held twice the window (issue 33). st.mu is
// held.
func (st *stream) bufferLocked(buf *[]byte) {
	k := len(st.chunks)
	if k == 0 {
		st.chunks = append(st.chunks, buf)
		return
	}
	last, rest := st.chunks[k-1], *buf
	for {
		n := min(cap(*last)-len(*last), len(rest))
		*last = append(*last, rest[:n]...)
		if rest = rest[n:]; len(rest) == 0 {
			break
		}
		last = getChunk(behindChunk)
		*last = (*last)[:0]
		st.chunks = append(st.chunks, last)
	}
	putChunk(buf)
}

// behindChunk is the size of the chunks that hold what a reader that is
// behind has not read.
const behindChunk = 64 << 10

// grow adds to the send window, which stops at the most a uint32 holds:
// grants past it (only a broken peer sends them) must not wrap it round to
// a window smaller than before.
func (st *stream) grow(delta uint32) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.sendWin = uint32(min(uint64(st.sendWin)+uint64(delta), math.MaxUint32))
	if delta > 0 {
		st.waiting = false
	}
	notify(st.writable)
}

// peerWaits hears that the peer has data for the stream and no window. If
// the reader here keeps up, with no more than a quarter of the window
// unread, the window is what holds the stream back: it doubles, up to
// MaxStreamWindow and as far as the session's MaxWindowGrowth has room,
// and it returns the growth, to grant the peer now. A reader that falls
// behind leaves it as it is, and so does a stream that is ending.
//
// The peer says it waits right behind the last bytes the window let it
// send, so they have often just arrived, and the reader, however quick,
// may not have run yet (a busy machine's scheduler decides). Such a
// reader is not behind until data comes again: if it gets to a quarter of
// the window unread before that, the window grows then (consumedLocked).
func (st *stream) peerWaits() (grant uint32) {
	st.mu.Lock()
	defer st.mu.Unlock()
	// Only once this side's SYN or ACK enlarged the window: a stream that
	// waits to be accepted has no reader yet, quick or not.
	st.peerWaited = st.givenLocked() >= int(st.window)
	return st.growLocked()
}

// givenLocked is what the peer was given: the whole window once this
// side's SYN or ACK enlarged it, the initial 256 KiB before, while a
// stream waits to be accepted. st.mu is held.
func (st *stream) givenLocked() int {
	return st.unreadLocked() + int(st.credit) + int(st.recvWin)
}

// growLocked grows the window as peerWaits says, and returns the growth;
// it clears peerWaited once the window can't grow or has. st.mu is held.
func (st *stream) growLocked() (grant uint32) {
	limit := st.s.cfg.MaxStreamWindow
	if st.window >= limit || st.closed || st.reset || st.finRecv {
		st.peerWaited = false
		return 0
	}
	// The share unread is of what the peer was given.
	if st.unreadLocked() > st.givenLocked()/4 {
		return 0
	}
	st.peerWaited = false
	grant = st.s.growBy(min(st.window, limit-st.window))
	st.window += grant
	st.grown += grant
	st.recvWin += grant
	return grant
}

// unreadLocked is how many received bytes wait to be read, or to be
// written by WriteTo. st.mu is held.
func (st *stream) unreadLocked() int {
	n := st.draining - st.off
	for _, c := range st.chunks {
		n += len(*c)
	}
	return n
}

func (st *stream) LocalAddr() net.Addr  { return st.s.LocalAddr() }
func (st *stream) RemoteAddr() net.Addr { return st.s.RemoteAddr() }
