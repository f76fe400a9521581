// Package faultproxy is a TCP proxy for tests that breaks the network on
// command: it can stop forwarding without closing anything (a blackhole, as
// when a NAT or firewall silently drops a connection), reset every
// connection, or refuse new ones.
package faultproxy

import (
	"errors"
	"io"
	"net"
	"sync"
)

// Proxy forwards connections from its own address to a target.
type Proxy struct {
	ln     net.Listener
	target string

	wg sync.WaitGroup // the accept loop and every copier

	mu        sync.Mutex // guards the following
	cond      *sync.Cond // signalled when blackholed changes or the proxy closes
	blackhole bool
	closed    bool
	conns     map[net.Conn]struct{}
}

// New starts a proxy on 127.0.0.1 forwarding to target.
func New(target string) (*Proxy, error) {
	return NewAt("127.0.0.1:0", target)
}

// NewAt starts a proxy listening on addr, forwarding to target.
func NewAt(addr, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's address, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetBlackhole stops (true) or resumes (false) forwarding in both directions.
// While stopped, connections stay open and new ones are accepted but carry
// nothing: bytes wait in the kernel's buffers, as on a dead network path.
func (p *Proxy) SetBlackhole(on bool) {
	p.mu.Lock()
	p.blackhole = on
	p.mu.Unlock()
	p.cond.Broadcast()
}

// Reset closes every open connection, both sides.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0) // send RST, not FIN
		}
		c.Close()
	}
}

// Close stops the proxy, closes every connection and waits for its
// goroutines. It may be called more than once.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.cond.Broadcast()
	p.ln.Close()
	p.Reset()
	p.wg.Wait()
	return nil
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		if !p.track(in, out) {
			return
		}
		p.wg.Add(1)
		go p.pipe(in, out)
	}
}

func (p *Proxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range conns {
			c.Close()
		}
		return false
	}
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
	return true
}

// pipe copies both ways between a and b until both directions are done.
func (p *Proxy) pipe(a, b net.Conn) {
	defer p.wg.Done()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.copy(a, b) }()
	go func() { defer wg.Done(); p.copy(b, a) }()
	wg.Wait()
	p.mu.Lock()
	delete(p.conns, a)
	delete(p.conns, b)
	p.mu.Unlock()
	a.Close()
	b.Close()
}

// copy moves bytes from src to dst, waiting while the proxy is blackholed.
// An EOF half-closes dst; any other error closes both.
func (p *Proxy) copy(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		if !p.waitOpen() {
			return
		}
		n, err := src.Read(buf)
		if n > 0 {
			// Bytes read just before a blackhole began are held too.
			if !p.waitOpen() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				src.Close()
				dst.Close()
				return
			}
		}
		if err != nil && !p.waitOpen() {
			// A close is news too: a blackhole holds it back.
			return
		}
		if errors.Is(err, io.EOF) {
			if tc, ok := dst.(*net.TCPConn); ok {
				tc.CloseWrite()
				return
			}
		}
		if err != nil {
			src.Close()
			dst.Close()
			return
		}
	}
}

// waitOpen waits while the proxy is blackholed; false once it is closed.
func (p *Proxy) waitOpen() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.blackhole && !p.closed {
		p.cond.Wait()
	}
	return !p.closed
}
