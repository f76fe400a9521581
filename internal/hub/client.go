package hub

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetherhq/tether/internal/tunnel"
)

// apiClient sends the requests that may be sent twice (GET, HEAD and
// OPTIONS, with no body) to a cluster's API server over HTTP/1.1, in the
// caller's goroutine: it writes the request and reads the answer itself.
// net/http's transport hands each request to a write loop and each answer
// back from a read loop, two goroutine wakes that cost about 0.07 ms per
// request here (docs/decisions/016-the-hubs-own-http-client.md). Requests
// with a body, and upgrades, go through net/http's transport, which writes a
// body while it reads an early answer.
//
// Connections are kept for reuse as net/http keeps them: at most
// maxIdleAPIConns idle, each closed after idleTimeout unused, or as soon as
// anything arrives on it while idle (the API server closing it, as a rule:
// the tunnel stream tells, so no goroutine waits on an idle connection). A
// request on a kept connection that turns out closed (it read nothing of
// the answer) is sent again on another.
type apiClient struct {
	dial        func(context.Context) (*tls.Conn, error)
	idleTimeout time.Duration // 0: kept until closed

	mu     sync.Mutex
	idle   []*apiConn // the most recently used last
	closed bool

	// expiring counts the runs of expire that timers and the tunnel's
	// read loop start; close waits for them.
	expiring sync.WaitGroup
}

// streamOf returns the tunnel stream under a connection the client dialed,
// for tunnel.OnReadable and tunnel.Ready; other connections are returned
// as they are, and the tunnel package leaves them alone.
func streamOf(tc *tls.Conn) net.Conn {
	if cc, ok := tc.NetConn().(*countingConn); ok {
		return cc.Conn
	}
	return tc.NetConn()
}

// apiConn is one connection to the API server; in the client's idle list
// or in one request's hands.
type apiConn struct {
	client *apiClient
	tc     *tls.Conn
	br     *bufio.Reader
	bw     *bufio.Writer
	read   int64       // bytes read through br, to tell whether an answer began
	began  int64       // read when the request in hand was sent
	large  bool        // it has carried an answer of more than largeAnswer
	timer  *time.Timer // closes it after idleTimeout in the idle list
}

func (pc *apiConn) Read(p []byte) (int, error) {
	n, err := pc.tc.Read(p)
	pc.read += int64(n)
	return n, err
}

// replayable says whether a request may go through apiClient: one that can
// be sent again if a kept connection turns out closed, as net/http's
// transport judges it.
func replayable(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
	default:
		return false
	}
	return (r.Body == nil || r.Body == http.NoBody) && r.Header.Get("Upgrade") == ""
}

// RoundTrip sends req, which must be replayable, and returns the answer.
// The answer's body holds the connection until it is read to its end or
// closed; req's context ending closes the connection.
func (c *apiClient) RoundTrip(req *http.Request) (*http.Response, error) {
	return c.roundTrip(req, false)
}

// small returns a RoundTripper over c for requests with small answers sent
// on a schedule, the probes: it never takes a connection that has carried
// a large answer.
//
// crypto/tls keeps a connection's input buffer as large as the largest
// record that came on it, 16 KiB and more once an answer ran to a few
// records. Taken every 10 s, such a connection would never stay idle long
// enough to expire, and a cluster someone once listed pods of would hold
// that buffer on the hub for as long as its agent stays connected. Left
// alone, it expires after the idle timeout, and the probes keep a
// connection of their own that stays small.
func (c *apiClient) small() http.RoundTripper { return smallAnswers{c} }

type smallAnswers struct{ c *apiClient }

func (s smallAnswers) RoundTrip(req *http.Request) (*http.Response, error) {
	return s.c.roundTrip(req, true)
}

// largeAnswer is the size of answer, head and body, past which a connection
// no longer serves small: the API server's records had grown to several
// KiB by then (Go's TLS raises its records' size as a connection carries
// more), and one record sizes the buffer.
const largeAnswer = 16 << 10

func (c *apiClient) roundTrip(req *http.Request, small bool) (*http.Response, error) {
	for {
		pc, reused, err := c.get(req.Context(), small)
		if err != nil {
			return nil, err
		}
		before := pc.read
		pc.began = before
		resp, err := pc.roundTrip(req)
		if err == nil {
			return resp, nil
		}
		pc.tc.Close()
		if ctxErr := req.Context().Err(); ctxErr != nil {
			return nil, ctxErr
		}
		if !reused || pc.read != before {
			return nil, err
		}
		// A kept connection the API server (or the agent) had closed:
		// nothing of an answer came, so the request is sent again.
	}
}

// get takes the most recently used idle connection, one that has carried
// no large answer if small, or makes one.
func (c *apiClient) get(ctx context.Context, small bool) (pc *apiConn, reused bool, err error) {
	if pc := c.takeIdle(small); pc != nil {
		return pc, true, nil
	}
	tc, err := c.dial(ctx)
	if err != nil {
		return nil, false, err
	}
	pc = &apiConn{client: c, tc: tc}
	pc.takeBuffers()
	return pc, false, nil
}

// bufio's readers and writers for the connections in use: an idle
// connection holds none, so a cluster's idle connections (its probe's, at
// least) cost no 8 KiB each.
var (
	apiReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4<<10) }}
	apiWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4<<10) }}
)

// takeBuffers gives pc a reader and a writer for a request.
func (pc *apiConn) takeBuffers() {
	pc.br = apiReaders.Get().(*bufio.Reader)
	pc.br.Reset(pc)
	pc.bw = apiWriters.Get().(*bufio.Writer)
	pc.bw.Reset(pc.tc)
}

// dropBuffers gives them back, once the request is done and nothing is
// left in them.
func (pc *apiConn) dropBuffers() {
	pc.br.Reset(nil)
	apiReaders.Put(pc.br)
	pc.bw.Reset(nil)
	apiWriters.Put(pc.bw)
	pc.br, pc.bw = nil, nil
}

// takeIdle takes the most recently used idle connection that has had
// nothing arrive (and carried no large answer, if small), or returns nil.
// It asks the tunnel about the stream outside c.mu: the read loop calls a
// stream's onReadable with the stream's lock held, and keep's callback
// takes c.mu.
func (c *apiClient) takeIdle(small bool) *apiConn {
	for {
		pc := c.popIdle(small)
		if pc == nil {
			return nil
		}
		tunnel.OnReadable(streamOf(pc.tc), nil)
		if tunnel.Ready(streamOf(pc.tc)) {
			pc.tc.Close() // closed by the API server since, or worse
			continue
		}
		pc.takeBuffers()
		return pc
	}
}

// popIdle takes the most recently used idle connection (that has carried
// no large answer, if small) off the list, or returns nil.
func (c *apiClient) popIdle(small bool) *apiConn {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := len(c.idle) - 1
	for small && i >= 0 && c.idle[i].large {
		i--
	}
	if i < 0 {
		return nil
	}
	pc := c.idle[i]
	c.idle = slices.Delete(c.idle, i, i+1)
	if pc.timer != nil {
		pc.timer.Stop()
	}
	return pc
}

// put keeps pc for the next request, or closes it if the client keeps
// enough or is closed.
func (c *apiClient) put(pc *apiConn) {
	if !c.keep(pc) {
		pc.tc.Close()
	}
}

// keep adds pc to the idle list, unless the list is full or the client
// closed.
func (c *apiClient) keep(pc *apiConn) bool {
	pc.dropBuffers() // the answer was read to its end: both are empty
	if pc.read-pc.began > largeAnswer {
		pc.large = true
	}
	// Nothing may arrive on an idle connection: what does is its end, or
	// an answer no one asked for. Either way it can't be used again. The
	// read loop that says so must not wait for a TLS close. The callback is
	// set before the connection is listed, and outside c.mu (see
	// takeIdle): what arrives in between finds it unlisted, and takeIdle
	// then finds the stream Ready.
	stream := streamOf(pc.tc)
	tunnel.OnReadable(stream, func() {
		if c.startExpiring() {
			go func() {
				defer c.expiring.Done()
				c.expire(pc)
			}()
		}
	})
	if !c.list(pc) {
		tunnel.OnReadable(stream, nil)
		return false
	}
	return true
}

// list adds pc to the idle list and starts its idle timer, unless the list
// is full or the client closed.
func (c *apiClient) list(pc *apiConn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || len(c.idle) >= maxIdleAPIConns {
		return false
	}
	if c.idleTimeout > 0 {
		if pc.timer == nil {
			pc.timer = time.AfterFunc(c.idleTimeout, func() {
				if c.startExpiring() {
					defer c.expiring.Done()
					c.expire(pc)
				}
			})
		} else {
			pc.timer.Reset(c.idleTimeout)
		}
	}
	c.idle = append(c.idle, pc)
	return true
}

// startExpiring counts a run of expire for close to wait for, and reports
// whether to run it: once the client is closed, close has closed the idle
// connections itself.
func (c *apiClient) startExpiring() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.expiring.Add(1)
	return true
}

// expire closes pc if it is still idle.
func (c *apiClient) expire(pc *apiConn) {
	c.mu.Lock()
	i := slices.Index(c.idle, pc)
	if i >= 0 {
		c.idle = slices.Delete(c.idle, i, i+1)
		if pc.timer != nil {
			pc.timer.Stop()
		}
	}
	c.mu.Unlock()
	if i >= 0 {
		pc.tc.Close()
	}
}

// close closes the idle connections and keeps none from now on, and waits
// for the runs of expire already started. Requests in flight go on.
func (c *apiClient) close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.closeIdle()
	c.expiring.Wait()
}

// closeIdle closes the connections kept idle now; the client goes on
// keeping those used next.
func (c *apiClient) closeIdle() {
	c.mu.Lock()
	idle := c.idle
	c.idle = nil
	c.mu.Unlock()
	for _, pc := range idle {
		if pc.timer != nil {
			pc.timer.Stop()
		}
		pc.tc.Close()
	}
}

// nothingReadAhead reports whether crypto/tls holds nothing of the
// connection's input beyond the answer just read: records it read along
// with the answer's last ones (an answer no one asked for) wait there,
// where neither the bufio reader nor the stream shows them. net/http's
// transport sees them as its read loop peeks at the idle connection.
func (pc *apiConn) nothingReadAhead() bool {
	if pc.tc.SetReadDeadline(time.Now()) != nil {
		return false
	}
	var b [1]byte
	n, err := pc.tc.Read(b[:])
	var ne net.Error
	quiet := n == 0 && errors.As(err, &ne) && ne.Timeout()
	return quiet && pc.tc.SetReadDeadline(time.Time{}) == nil
}

// errSwitched is an answer switching protocols to a request that asked for
// no upgrade.
var errSwitched = errors.New("the API server switched protocols unasked")

// roundTrip writes req on pc and reads the answer's head. The caller closes
// pc if it fails.
func (pc *apiConn) roundTrip(req *http.Request) (*http.Response, error) {
	stop := context.AfterFunc(req.Context(), func() { pc.tc.Close() })
	resp, err := pc.exchange(req)
	if err != nil {
		stop()
		return nil, err
	}
	body := &apiBody{pc: pc, body: resp.Body, ctx: req.Context(), stop: stop, reuse: !resp.Close}
	if resp.Body == http.NoBody {
		body.finish(true) // nothing to read: the connection is free now
		return resp, nil
	}
	resp.Body = body
	return resp, nil
}

func (pc *apiConn) exchange(req *http.Request) (*http.Response, error) {
	if err := req.Write(pc.bw); err != nil {
		return nil, err
	}
	if err := pc.bw.Flush(); err != nil {
		return nil, err
	}
	trace := httptrace.ContextClientTrace(req.Context())
	for range maxInformational + 1 {
		resp, err := http.ReadResponse(pc.br, req)
		if err != nil {
			return nil, err
		}
		switch {
		case resp.StatusCode < 100:
			// 000 to 099 parse, but mean nothing; passed on, the proxy's
			// WriteHeader panics on them.
			return nil, fmt.Errorf("the API server answered with status %03d", resp.StatusCode)
		case resp.StatusCode == http.StatusSwitchingProtocols:
			return nil, errSwitched
		case resp.StatusCode < 200:
			// 103 Early Hints and the like: passed on as net/http's
			// transport does (the proxy sends them to the client), and the
			// answer follows.
			if trace != nil && trace.Got1xxResponse != nil && resp.StatusCode != http.StatusContinue {
				if err := trace.Got1xxResponse(resp.StatusCode, textproto.MIMEHeader(resp.Header)); err != nil {
					return nil, err
				}
			}
			continue
		}
		return resp, nil
	}
	return nil, errTooManyInformational
}

// maxInformational is how many 1xx answers may come before the answer, as
// in net/http's transport.
const maxInformational = 5

var errTooManyInformational = errors.New("too many 1xx informational answers")

// apiBody is an answer's body. Read to its end, it gives its connection
// back for reuse; closed before that, it closes the connection: the rest of
// the answer (a watch, say) may never end, so it isn't drained.
type apiBody struct {
	pc    *apiConn
	body  io.ReadCloser
	ctx   context.Context // the request's
	stop  func() bool     // unregisters the close on the request's end
	reuse bool
	done  atomic.Bool
}

func (b *apiBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	if err != nil {
		b.finish(err == io.EOF)
		if err != io.EOF && b.ctx.Err() != nil {
			// The request's end closed the connection (a client that left
			// a watch): that is the reason, not the read's own error,
			// which the proxy would log as a fault.
			err = b.ctx.Err()
		}
	}
	return n, err
}

func (b *apiBody) Close() error {
	b.finish(false)
	return nil
}

func (b *apiBody) finish(atEnd bool) {
	if b.done.Swap(true) {
		return
	}
	// stop reports false once the request's end has closed the connection.
	if b.stop() && atEnd && b.reuse && b.pc.br.Buffered() == 0 && b.pc.nothingReadAhead() {
		b.pc.client.put(b.pc)
		return
	}
	b.pc.tc.Close()
}
