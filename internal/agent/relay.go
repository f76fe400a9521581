package agent

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetherhq/tether/internal/protocol"
	"github.com/tetherhq/tether/internal/tunnel"
)

// apiDialTimeout bounds a dial to the API server on behalf of one stream.
const apiDialTimeout = 10 * time.Second

// resetGrace bounds how long a relay writes what the hub sent before it
// reset the stream, to an API server that doesn't read it.
const resetGrace = 5 * time.Second

// relay serves one stream the hub opened: it dials the API server, the only
// target an agent ever dials (the protocol has no way to name another), tells
// the hub how the dial went, and copies bytes both ways until both are done.
// Under ProxyOff it first makes sure the stream is the hub's own (ownStream).
// relay closes st.
func (a *Agent) relay(ctx context.Context, st net.Conn) {
	defer st.Close()
	if a.cfg.ProxyOff && !a.ownStream(st) {
		return
	}
	dctx, cancel := context.WithTimeout(ctx, apiDialTimeout)
	api, err := a.cfg.DialAPIServer(dctx, "tcp", a.cfg.APIServer)
	cancel()
	if err != nil {
		a.log.Debug("Can't reach the API server for the hub", "stream", streamID(st), "err", err)
		st.SetWriteDeadline(time.Now().Add(5 * time.Second))
		_ = protocol.Write(st, protocol.Message{Type: protocol.TypeDial, Error: "the agent can't reach its API server at " + a.cfg.APIServer + ": " + err.Error()})
		return
	}
	defer api.Close()
	if err := protocol.Write(st, protocol.Message{Type: protocol.TypeDial}); err != nil {
		return
	}
	Splice(st, api)
}

// openTimeout bounds how long a proxy-off agent waits for the open message
// that marks a stream as the hub's own.
const openTimeout = 10 * time.Second

// MessageProxyOff is what a proxy-off agent answers a stream that isn't
// marked as the hub's own: the hub shows it as the agent's words.
const MessageProxyOff = "this agent takes no one's requests (TETHER_PROXY=false): only the hub's own probes and access reviews"

// ownStream reports whether st, a stream the hub opened, begins with the
// open message that marks it as the hub's own (protocol.TypeOpen, Own),
// before anything reaches the API server. Any other first bytes, a
// person's TLS from a hub that sends no mark (an older hub, or a mistake)
// included, and the stream is refused with a dial error: nothing of it is
// ever written to the API server. The mark holds against mistakes on the
// hub's side and against people, not against a hostile hub, which could
// mark anything (decision 030).
func (a *Agent) ownStream(st net.Conn) bool {
	st.SetReadDeadline(time.Now().Add(openTimeout))
	m, err := protocol.Read(st)
	st.SetReadDeadline(time.Time{})
	if err == nil && m.Type == protocol.TypeOpen && m.Own {
		return true
	}
	why := "no open message marking it as the hub's own"
	if err != nil {
		why += ": " + err.Error()
	}
	if a.refusedLogged.CompareAndSwap(false, true) {
		a.log.Warn("The hub opened a stream for someone's request, and the proxy is off (TETHER_PROXY=false): refused; later ones are logged at Debug", "stream", streamID(st), "err", why)
	} else {
		a.log.Debug("Refused a stream for someone's request (TETHER_PROXY=false)", "stream", streamID(st), "err", why)
	}
	st.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_ = protocol.Write(st, protocol.Message{Type: protocol.TypeDial, Error: MessageProxyOff})
	return false
}

// Splice copies both ways between a and b. When one direction ends cleanly
// (EOF), the other side's write half is closed and the other direction goes
// on: half-close passes through. When one ends with an error, both
// connections are closed so the other direction ends too; a, when it is a
// tunnel stream, is reset rather than closed, so the hub's reads fail as
// the API server's connection did, instead of ending as if the answer were
// whole. Splice returns when both directions are done.
//
// b to a is the bulk direction, the API server's answers to the hub. When
// a is a tunnel stream, its ReadFrom reads b itself, in reads of up to
// 256 KiB that each become one frame (decision 008), into a buffer it
// takes only once b has bytes: while b has nothing to say (a watch between
// events) the stream holds none (decision 024).
//
// a to b is copied by a's WriteTo when it has one: a tunnel stream's read
// loop then writes the hub's bytes straight into the API server's socket
// (decision 015). When the hub resets the stream, what it sent before the
// reset still reaches b (the hub's TLS alert, say): that direction writes
// it, given resetGrace, and then ends both.
func Splice(a, b net.Conn) {
	var once sync.Once
	abort := func() {
		once.Do(func() {
			if r, ok := a.(interface{ Reset() error }); ok {
				r.Reset()
			} else {
				a.Close()
			}
			b.Close()
		})
	}
	var wg sync.WaitGroup
	var peerReset atomic.Bool
	wg.Add(2)
	go copier{dst: a, src: b, abort: abort, readFrom: true, peerReset: &peerReset}.run(&wg)
	go copier{dst: b, src: a, abort: abort}.run(&wg)
	wg.Wait()
	if peerReset.Load() {
		abort() // b too, when the other direction had ended cleanly
	}
}

// copier is one direction of a splice; a named type so goroutine dumps say
// what each goroutine is.
type copier struct {
	dst, src net.Conn
	abort    func()
	// readFrom: copy with dst's ReadFrom when it has one. io.Copy would
	// prefer a TCP source's WriteTo, which copies through 32 KiB of its
	// own and hides the socket from a stream's ReadFrom. The other
	// direction wants io.Copy's choice, the stream's WriteTo.
	readFrom bool
	// peerReset is set when the hub reset the stream (readFrom only).
	peerReset *atomic.Bool
}

func (c copier) run(wg *sync.WaitGroup) {
	defer wg.Done()
	var err error
	if rf, ok := c.dst.(io.ReaderFrom); ok && c.readFrom {
		_, err = rf.ReadFrom(c.src)
	} else {
		_, err = io.Copy(c.dst, c.src)
	}
	if c.readFrom && errors.Is(err, tunnel.ErrStreamReset) {
		// The other direction ends too once it has written what the
		// hub sent before its reset; it aborts then.
		c.peerReset.Store(true)
		c.src.SetWriteDeadline(time.Now().Add(resetGrace))
		return
	}
	if err != nil && !errors.Is(err, io.EOF) {
		c.abort()
		return
	}
	closeWrite(c.dst)
}

// closeWrite half-closes c: a TCP connection or a tunnel stream shuts its
// write side (FIN) and keeps reading.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}

func streamID(c net.Conn) uint32 {
	if s, ok := c.(interface{ StreamID() uint32 }); ok {
		return s.StreamID()
	}
	return 0
}
