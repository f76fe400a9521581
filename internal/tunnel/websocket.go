package tunnel

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
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
	batch  *batchConn         // under the agent's TLS; nil elsewhere
	// controlTimeout bounds the write of a ping's answer.
	controlTimeout time.Duration

	wlock chan struct{} // cap 1: one frame at a time
	wdl   time.Time     // the socket's write deadline as last set; under wlock

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
	var hb [maxWSHeader]byte
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
	c.batch.hold()
	_, err := c.rw.Write(frame)
	if rerr := c.batch.release(); err == nil {
		err = rerr
	}
	return err
}

// Close drops the connection at once: a close handshake the peer may never
// answer would only delay the end.
func (c *wsConn) Close() error         { return c.rw.Close() }
func (c *wsConn) LocalAddr() net.Addr  { return c.raw.LocalAddr() }
func (c *wsConn) RemoteAddr() net.Addr { return c.raw.RemoteAddr() }

// lazyReader is a hub's buffered reader that holds no buffer between
// frames. Read borrows a pooled buffer of size bytes for reads smaller than
// that, as bufio.Reader reads, and gives it back once its bytes are read;
// reads of size or more go straight to r. waitFrame reads a frame's first
// bytes, the read that waits while the connection is idle, straight into
// the caller's slice when nothing is buffered, so the idle connection holds
// no buffer: a small frame costs a second read (none under TLS, whose
// record is already in crypto/tls's buffer). Decision 012.
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

// maskCopy XORs src with the mask key into dst, which may be src, starting
// pos bytes into the key, and returns the position after. Eight bytes at a
// time: the key repeats every four, so a word holds it twice.
func maskCopy(dst, src []byte, key [4]byte, pos int) int {
	n := len(src)
	dst = dst[:n]
	var k [8]byte
	for i := range k {
		k[i] = key[(pos+i)&3]
	}
	k64 := binary.LittleEndian.Uint64(k[:])
	i := 0
	for ; i+32 <= n; i += 32 {
		s, d := src[i:i+32], dst[i:i+32]
		binary.LittleEndian.PutUint64(d[0:], binary.LittleEndian.Uint64(s[0:])^k64)
		binary.LittleEndian.PutUint64(d[8:], binary.LittleEndian.Uint64(s[8:])^k64)
		binary.LittleEndian.PutUint64(d[16:], binary.LittleEndian.Uint64(s[16:])^k64)
		binary.LittleEndian.PutUint64(d[24:], binary.LittleEndian.Uint64(s[24:])^k64)
	}
	for ; i+8 <= n; i += 8 {
		binary.LittleEndian.PutUint64(dst[i:], binary.LittleEndian.Uint64(src[i:])^k64)
	}
	for ; i < n; i++ {
		dst[i] = src[i] ^ k[i&7]
	}
	return (pos + n) & 3
}

// acceptKey is the Sec-WebSocket-Accept that answers key.
func acceptKey(key string) string {
	h := sha1.Sum([]byte(key + wsGUID))
	return base64.StdEncoding.EncodeToString(h[:])
}

// headerHas reports whether a comma-separated header holds token, as
// Connection: keep-alive, Upgrade does.
func headerHas(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// upgrade answers a WebSocket upgrade request with 101 and takes over its
// connection, or answers with an error and returns it.
func upgrade(w http.ResponseWriter, r *http.Request) (net.Conn, error) {
	fail := func(status int, why string) (net.Conn, error) {
		if status == http.StatusUpgradeRequired {
			w.Header().Set("Sec-WebSocket-Version", "13")
		}
		http.Error(w, why, status)
		return nil, fmt.Errorf("%w: %s", ErrBadHandshake, why)
	}
	key := r.Header.Get("Sec-WebSocket-Key")
	switch {
	case r.Method != http.MethodGet:
		return fail(http.StatusMethodNotAllowed, "a WebSocket upgrade must be a GET")
	case !headerHas(r.Header, "Connection", "upgrade") || !headerHas(r.Header, "Upgrade", "websocket"):
		return fail(http.StatusUpgradeRequired, "this is a WebSocket: the request must upgrade to one")
	case r.Header.Get("Sec-WebSocket-Version") != "13":
		return fail(http.StatusUpgradeRequired, "WebSocket version 13 is the one spoken here")
	}
	if k, err := base64.StdEncoding.DecodeString(key); err != nil || len(k) != 16 {
		return fail(http.StatusBadRequest, "the WebSocket key is not 16 bytes in base64")
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return fail(http.StatusInternalServerError, "the connection can't be taken over: "+err.Error())
	}
	if brw.Reader.Buffered() > 0 {
		conn.Close()
		return nil, fmt.Errorf("%w: the client sent data before the handshake was done", ErrBadHandshake)
	}
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	_, err = io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: "+acceptKey(key)+"\r\n\r\n")
	conn.SetDeadline(time.Time{})
	if err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// upgraded is a client's connection once the server answered 101: what
// net/http hands over (it may hold bytes read past the answer), the socket
// under it for deadlines, and, under TLS, the batchConn that gathers each
// frame's records.
type upgraded struct {
	rw    io.ReadWriteCloser
	raw   net.Conn
	batch *batchConn
}

// wsConn makes the client's side of the WebSocket on u.
func (u upgraded) wsConn(readBuffer int, cfg Config) *wsConn {
	c := newWSConn(u.rw, u.raw, readBuffer, true, cfg)
	c.batch = u.batch
	return c
}

// dialWebSocket makes the upgrade request through net/http, which brings
// proxies (HTTPS_PROXY, NO_PROXY) and TLS, and returns the connection
// after a valid 101. Any other answer is returned with ErrBadHandshake.
func dialWebSocket(ctx context.Context, rawURL string, opts DialOptions) (upgraded, *http.Response, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return upgraded{}, nil, err
	}
	switch u.Scheme {
	case "ws":
		u.Scheme = "http"
	case "wss":
		u.Scheme = "https"
	default:
		return upgraded{}, nil, fmt.Errorf("tunnel: %q is not a ws:// or wss:// URL", rawURL)
	}
	var nonce [16]byte
	rand.Read(nonce[:])
	key := base64.StdEncoding.EncodeToString(nonce[:])
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return upgraded{}, nil, err
	}
	for k, v := range opts.Header {
		req.Header[k] = v
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	req.Header.Set("Sec-WebSocket-Key", key)

	// net/http CONNECTs through a proxy to https targets, but sends plain
	// http requests to it as they are, and few proxies pass an upgrade on.
	// So for ws:// the dial CONNECTs itself, as for wss://.
	var tunnelProxy *url.URL
	if opts.DialContext != nil {
		opts.Proxy = nil
	}
	if opts.Proxy != nil && u.Scheme == "http" {
		if tunnelProxy, err = opts.Proxy(req); err != nil {
			return upgraded{}, nil, err
		}
	}
	var (
		mu    sync.Mutex // guards raw and batch, set by the transport's dial
		raw   net.Conn
		batch *batchConn
	)
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dial := func() (net.Conn, error) { return dialThrough(ctx, tunnelProxy, addr) }
			if opts.DialContext != nil {
				dial = func() (net.Conn, error) { return opts.DialContext(ctx, network, addr) }
			}
			c, err := dial()
			if err != nil {
				return nil, err
			}
			var b *batchConn
			if u.Scheme == "https" {
				// Under TLS, gather each frame's records into one
				// write. With a proxy, this is the connection to the
				// proxy, below every TLS layer.
				b = &batchConn{Conn: c}
				c = b
			}
			mu.Lock()
			raw, batch = c, b
			mu.Unlock()
			return c, nil
		},
		TLSClientConfig:        opts.TLSConfig,
		DisableCompression:     true,
		MaxResponseHeaderBytes: 64 << 10,
	}
	if u.Scheme == "https" {
		tr.Proxy = opts.Proxy
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return upgraded{}, nil, err
	}
	if err := checkUpgrade(resp, key); err != nil {
		resp.Body.Close()
		// A server may keep the refused connection alive; nothing will
		// use this transport again.
		tr.CloseIdleConnections()
		return upgraded{}, resp, err
	}
	rw, ok := resp.Body.(io.ReadWriteCloser)
	mu.Lock()
	defer mu.Unlock()
	if !ok || raw == nil {
		resp.Body.Close()
		return upgraded{}, resp, fmt.Errorf("%w: no connection to take over", ErrBadHandshake)
	}
	return upgraded{rw: rw, raw: raw, batch: batch}, resp, nil
}

// dialThrough connects to addr, through an HTTP proxy's CONNECT when proxy
// is set.
func dialThrough(ctx context.Context, proxy *url.URL, addr string) (net.Conn, error) {
	var d net.Dialer
	if proxy == nil {
		return d.DialContext(ctx, "tcp", addr)
	}
	if proxy.Scheme != "http" {
		return nil, fmt.Errorf("tunnel: proxy %s: only http:// proxies carry ws:// connections", proxy.Redacted())
	}
	paddr := proxy.Host
	if proxy.Port() == "" {
		paddr = net.JoinHostPort(proxy.Hostname(), "80")
	}
	c, err := d.DialContext(ctx, "tcp", paddr)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	req := &http.Request{Method: http.MethodConnect, URL: &url.URL{Opaque: addr}, Host: addr, Header: http.Header{}}
	if u := proxy.User; u != nil {
		p, _ := u.Password()
		req.Header.Set("Proxy-Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(u.Username()+":"+p)))
	}
	// The proxy's answer is read a byte at a time, so nothing after it
	// is taken from the connection.
	resp, err := func() (*http.Response, error) {
		if err := req.Write(c); err != nil {
			return nil, err
		}
		return http.ReadResponse(bufio.NewReaderSize(oneByteReader{c}, 16), req)
	}()
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("tunnel: proxy %s answered CONNECT with %s", proxy.Redacted(), resp.Status)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

// oneByteReader reads at most a byte per call.
type oneByteReader struct{ r io.Reader }

func (o oneByteReader) Read(p []byte) (int, error) { return o.r.Read(p[:min(len(p), 1)]) }

// checkUpgrade says whether resp accepts the upgrade asked for with key.
func checkUpgrade(resp *http.Response, key string) error {
	switch {
	case resp.StatusCode != http.StatusSwitchingProtocols:
		return fmt.Errorf("%w: the hub answered %s", ErrBadHandshake, resp.Status)
	case !headerHas(resp.Header, "Upgrade", "websocket") || !headerHas(resp.Header, "Connection", "upgrade"):
		return fmt.Errorf("%w: the 101 does not upgrade to a WebSocket", ErrBadHandshake)
	case resp.Header.Get("Sec-WebSocket-Accept") != acceptKey(key):
		return fmt.Errorf("%w: the 101's Sec-WebSocket-Accept does not match the key", ErrBadHandshake)
	case resp.Header.Get("Sec-WebSocket-Extensions") != "":
		return fmt.Errorf("%w: the hub chose extensions nobody asked for", ErrBadHandshake)
	}
	return nil
}
