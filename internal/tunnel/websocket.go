package tunnel

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/tetherhq/tether/internal/gather"
)

// The tunnel's WebSocket (RFC 6455) after the handshake is Tether's own:
// binary messages, read as one byte stream, and the control frames; no
// extensions or subprotocols. A client masks each frame while copying it
// into the buffer it is sent from, in one pass; a server reads frame bodies
// straight into the stream's buffers and unmasks them there. gorilla's
// Conn copied every frame into its buffer and then masked it in place, a
// third of what the agent spent per byte (decision 011).

// WebSocket opcodes.
const (
	opContinuation = 0x0
	opText         = 0x1
	opBinary       = 0x2
	opClose        = 0x8
	opPing         = 0x9
	opPong         = 0xa
)

const (
	// maxWSHeader is the longest frame header: two bytes, an 8-byte
	// length and a 4-byte mask key.
	maxWSHeader = 14
	// maxControl is the most a control frame may carry.
	maxControl = 125
	// copyLimit is the largest frame a server copies into one buffer
	// before writing; larger ones go out as a vectored write.
	copyLimit = 16 << 10
	// wsGUID is what the key is hashed with to accept it.
	wsGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
)

// ErrBadHandshake is returned by Dial when the hub answers the upgrade
// with anything but a valid 101.
var ErrBadHandshake = errors.New("tunnel: bad WebSocket handshake")

// errNotBinary is returned when the peer sends a text message: the tunnel
// only carries binary ones.
var errNotBinary = errors.New("tunnel: a text message on the tunnel's WebSocket")

// wsConn carries frames over a WebSocket: each frame goes out as one
// binary message, and Read runs through the peer's messages as one byte
// stream, so a peer may split frames across messages or join them (yamux
// writes a data frame's header and body as two). Read is called by the
// session's read loop alone; writes take wlock.
type wsConn struct {
	rw     io.ReadWriteCloser // the connection, TLS and all
	raw    net.Conn           // the socket under it: deadlines, addresses
	br     io.Reader          // reads rw: a bufio.Reader, or a lazyReader on the hub
	start  io.Reader          // reads the start of each frame: br, or its frameStart
	client bool               // masks what it sends, and wants nothing masked
	batch  *gather.Conn       // under the agent's TLS; nil elsewhere
	// controlTimeout bounds the write of a ping's answer.
	controlTimeout time.Duration

	wlock chan struct{}     // cap 1: one frame at a time
	wdl   time.Time         // the socket's write deadline as last set; under wlock
	whdr  [maxWSHeader]byte // the header of the frame being written; under wlock

	// The frame being read; only Read touches these.
	left      int64 // its payload bytes not yet read
	masked    bool
	key       [4]byte
	keyPos    int
	fragments bool // a message has begun and not ended
	hdr       [maxWSHeader]byte
}

// newWSConn starts a WebSocket's framing on rw, whose socket is raw. It
// reads through a buffer of readBuffer bytes: held for good when the
// connection is a client's, borrowed only while it holds unread bytes when
// it is a server's, so an idle agent costs the hub none.
func newWSConn(rw io.ReadWriteCloser, raw net.Conn, readBuffer int, client bool, cfg Config) *wsConn {
	var br, start io.Reader
	if client {
		br = bufio.NewReaderSize(rw, readBuffer)
		start = br
	} else {
		lr := &lazyReader{r: rw, size: readBuffer}
		br, start = lr, frameStart{lr}
	}
	return &wsConn{
		rw:             rw,
		raw:            raw,
		br:             br,
		start:          start,
		client:         client,
		controlTimeout: cfg.WriteTimeout,
		wlock:          make(chan struct{}, 1),
	}
}

func (c *wsConn) Read(p []byte) (int, error) {
	for c.left == 0 {
		if err := c.nextFrame(); err != nil {
			return 0, err
		}
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.br.Read(p)
	if c.masked {
		c.keyPos = maskCopy(p[:n], p[:n], c.key, c.keyPos)
	}
	c.left -= int64(n)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF // in the middle of a frame
	}
	return n, err
}

// nextFrame reads frame headers, answering control frames, until a data
// frame's; c.left is then its length.
func (c *wsConn) nextFrame() error {
	b := c.hdr[:2]
	if _, err := io.ReadFull(c.start, b); err != nil {
		return err
	}
	fin, op := b[0]&0x80 != 0, b[0]&0x0f
	c.masked = b[1]&0x80 != 0
	length := int64(b[1] & 0x7f)
	switch {
	case b[0]&0x70 != 0:
		return fmt.Errorf("%w: WebSocket frame with reserved bits %#x", errProtocol, b[0]&0x70)
	case c.masked == c.client:
		if c.client {
			return fmt.Errorf("%w: a masked WebSocket frame from the server", errProtocol)
		}
		return fmt.Errorf("%w: an unmasked WebSocket frame from the client", errProtocol)
	}
	switch length {
	case 126:
		if _, err := io.ReadFull(c.br, c.hdr[:2]); err != nil {
			return noEOF(err)
		}
		length = int64(binary.BigEndian.Uint16(c.hdr[:2]))
	case 127:
		if _, err := io.ReadFull(c.br, c.hdr[:8]); err != nil {
			return noEOF(err)
		}
		length = int64(binary.BigEndian.Uint64(c.hdr[:8]))
		if length < 0 {
			return fmt.Errorf("%w: WebSocket frame length out of range", errProtocol)
		}
	}
	if c.masked {
		if _, err := io.ReadFull(c.br, c.key[:]); err != nil {
			return noEOF(err)
		}
		c.keyPos = 0
	}
	switch op {
	case opBinary, opContinuation:
		if (op == opContinuation) != c.fragments {
			return fmt.Errorf("%w: WebSocket continuation frame out of place", errProtocol)
		}
		c.fragments = !fin
		c.left = length
		return nil
	case opText:
		return errNotBinary
	case opClose, opPing, opPong:
		if !fin || length > maxControl {
			return fmt.Errorf("%w: WebSocket control frame fragmented or longer than %d bytes", errProtocol, maxControl)
		}
		var payload [maxControl]byte
		body := payload[:length]
		if _, err := io.ReadFull(c.br, body); err != nil {
			return noEOF(err)
		}
		if c.masked {
			maskCopy(body, body, c.key, 0)
		}
		return c.control(op, body)
	}
	return fmt.Errorf("%w: WebSocket opcode %#x", errProtocol, op)
}

// control acts on a control frame: a ping is answered, a pong ignored, and
// a close ends the reading.
func (c *wsConn) control(op byte, body []byte) error {
	switch op {
	case opPing:
		c.lock()
		defer c.unlock()
		return c.write(opPong, body, nil, time.Now().Add(c.controlTimeout))
	case opClose:
		if len(body) < 2 {
			return io.EOF
		}
		code := binary.BigEndian.Uint16(body)
		if code == 1000 || code == 1001 { // normal closure, going away
			return io.EOF
		}
		return fmt.Errorf("tunnel: the peer closed the WebSocket: %d %q", code, body[2:])
	}
	return nil
}

// noEOF turns an end of input inside a frame's header into an error.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

func (c *wsConn) lock()   { c.wlock <- struct{}{} }
func (c *wsConn) unlock() { <-c.wlock }

func (c *wsConn) WriteFrame(hdr, body []byte, deadline time.Time) error {
	c.lock()
	defer c.unlock()
	return c.write(opBinary, hdr, body, deadline)
}

// writeClose sends a close frame with code and reason, if the connection
// is free to write within a second.
func (c *wsConn) writeClose(code int, reason string) {
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case c.wlock <- struct{}{}:
	case <-t.C:
		return
	}
	defer c.unlock()
	var b [maxControl]byte
	binary.BigEndian.PutUint16(b[:], uint16(code))
	n := 2 + copy(b[2:], reason)
	c.write(opClose, b[:n], nil, time.Now().Add(time.Second))
}

// deadlineSlack is how far a frame's write deadline may be from the one the
// socket has before it is set again. Setting it updates a runtime timer;
// frames in a burst skip that, and a write that stalls still fails between
// WriteTimeout less deadlineSlack and WriteTimeout after it began. Measured:
// echo round trips 4 % faster (decision 015).
const deadlineSlack = time.Second

// write sends one frame whose payload is a then b. c.wlock is held.
func (c *wsConn) write(op byte, a, b []byte, deadline time.Time) error {
	if deadline.Before(c.wdl) || deadline.Sub(c.wdl) > deadlineSlack {
		c.raw.SetWriteDeadline(deadline)
		c.wdl = deadline
	}
	n := len(a) + len(b)
	// Held in c: a local array escaped to the heap, one allocation per
	// frame, through the vectored write below.
	hb := &c.whdr
	hb[0] = 0x80 | op // the final frame of its message
	h := 2
	switch {
	case n < 126:
		hb[1] = byte(n)
	case n <= 0xffff:
		hb[1] = 126
		binary.BigEndian.PutUint16(hb[2:], uint16(n))
		h += 2
	default:
		hb[1] = 127
		binary.BigEndian.PutUint64(hb[2:], uint64(n))
		h += 8
	}
	if c.client {
		// RFC 6455 has clients mask every frame with a fresh key.
		hb[1] |= 0x80
		var key [4]byte
		rand.Read(key[:])
		copy(hb[h:], key[:])
		h += 4
		buf := getChunk(h + n)
		frame := *buf
		copy(frame, hb[:h])
		maskCopy(frame[h+len(a):], b, key, maskCopy(frame[h:], a, key, 0))
		err := c.send(frame)
		putChunk(buf)
		return err
	}
	if n <= copyLimit {
		buf := getChunk(h + n)
		frame := *buf
		copy(frame[copy(frame, hb[:h]):], a)
		copy(frame[h+len(a):], b)
		_, err := c.rw.Write(frame)
		putChunk(buf)
		return err
	}
	// One writev on a plain socket; under TLS, records of their own.
	bufs := net.Buffers{hb[:h], a, b}
	_, err := bufs.WriteTo(c.rw)
	return err
}

// send writes a whole frame, gathered into one write under the agent's TLS.
func (c *wsConn) send(frame []byte) error {
	if c.batch == nil {
		_, err := c.rw.Write(frame)
		return err
	}
	c.batch.Hold()
	_, err := c.rw.Write(frame)
	if rerr := c.batch.Release(); err == nil {
		err = rerr
	}
	return err
}

// Close drops the connection at once: a close handshake the peer may never
// answer would only delay the end. The socket closes first: crypto/tls's
// Close sends a close_notify unless it sees a write in progress, and the
// agent's frames wait in gather's Release, outside crypto/tls, so that
// alert waited behind a stalled frame for its own 5 s deadline.
func (c *wsConn) Close() error {
	err := c.raw.Close()
	c.rw.Close()
	return err
}
func (c *wsConn) LocalAddr() net.Addr  { return c.raw.LocalAddr() }
func (c *wsConn) RemoteAddr() net.Addr { return c.raw.RemoteAddr() }

// lazyReader is a hub's buffered reader that holds no buffer between
// frames. Read borrows a pooled buffer of size bytes for reads smaller than
// that, as bufio.Reader reads, and gives it back once its bytes are read;
// reads of size or more go straight to r. waitFrame, the read that waits
// while the connection is idle, reads a frame's first bytes straight into
// the caller's slice, so it holds no buffer while it waits (decision 012).
// Under TLS the rest then costs no system call, since crypto/tls already
// holds the record. (On a plain socket it once waited for the socket to be
// readable through syscall.RawConn and read a small frame with one system
// call; the hub's production shape, wss, never took that path: decision
// 015.)
type lazyReader struct {
	r        io.Reader
	size     int
	buf      *[]byte // nil when nothing is buffered
	pos, end int
}

func (l *lazyReader) Read(p []byte) (int, error) {
	if l.buf == nil {
		if len(p) >= l.size {
			return l.r.Read(p)
		}
		buf := getChunk(l.size)
		n, err := l.r.Read(*buf)
		if n == 0 {
			putChunk(buf)
			return 0, err
		}
		// An error with data comes back on the next read from r.
		l.buf, l.pos, l.end = buf, 0, n
	}
	n := copy(p, (*l.buf)[l.pos:l.end])
	l.pos += n
	if l.pos == l.end {
		putChunk(l.buf)
		l.buf = nil
	}
	return n, nil
}

// waitFrame is Read for the start of a frame.
func (l *lazyReader) waitFrame(p []byte) (int, error) {
	if l.buf != nil {
		return l.Read(p)
	}
	return l.r.Read(p)
}

// frameStart reads the start of each frame through lazyReader.waitFrame.
type frameStart struct{ *lazyReader }

func (f frameStart) Read(p []byte) (int, error) { return f.waitFrame(p) }
