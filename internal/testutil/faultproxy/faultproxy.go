// Package faultproxy is a TCP proxy for tests that breaks the network on
// command: it can stop forwarding without closing anything (a blackhole, as
// when a NAT or firewall silently drops a connection), in one direction or
// both; delay every byte; throttle to a rate; slice writes into small
// pieces; reset every connection; and close connections that carry nothing
// for a while, as load balancers and NATs do.
//
// Each direction of each connection is a reader and a writer joined by a
// short queue: the reader stamps each chunk with when it arrived, and the
// writer forwards it once the delay has passed, at the throttled rate, in
// slices. So a delay is latency, not a cap on throughput.
package faultproxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// Direction names one way through the proxy.
type Direction int

const (
	// Up is from the client that connected to the proxy towards the target.
	Up Direction = iota
	// Down is from the target back to the client.
	Down
)

// Faults are what the proxy does to the bytes going one way. The zero value
// forwards them as they come.
type Faults struct {
	// Blackhole holds every byte and close: connections stay open and carry
	// nothing, as on a dead network path.
	Blackhole bool
	// Delay holds each chunk this long after it was read.
	Delay time.Duration
	// Rate, when positive, caps the bytes per second forwarded.
	Rate int
	// Slice, when positive, writes at most this many bytes at a time,
	// pausing SliceGap between writes: the peer reads short, odd pieces.
	Slice    int
	SliceGap time.Duration
}

// Proxy forwards connections from its own address to a target.
type Proxy struct {
	ln     net.Listener
	target string

	wg sync.WaitGroup // the accept loop, the idle janitor and every copier

	mu     sync.Mutex // guards the following
	cond   *sync.Cond // signalled when faults change or the proxy closes
	faults [2]Faults  // by Direction
	idle   time.Duration
	closed bool
	pairs  map[*pair]struct{}
	stop   chan struct{} // closed by Close
}

// pair is one proxied connection: in from the client, out to the target.
type pair struct {
	in, out net.Conn

	mu   sync.Mutex // guards last
	last time.Time  // when a byte last went either way
}

func (p *pair) touch() {
	p.mu.Lock()
	p.last = time.Now()
	p.mu.Unlock()
}

func (p *pair) idleFor() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return time.Since(p.last)
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
	p := &Proxy{ln: ln, target: target, pairs: map[*pair]struct{}{}, stop: make(chan struct{})}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(2)
	go p.accept()
	go p.janitor()
	return p, nil
}

// Addr is the proxy's address, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetBlackhole stops (true) or resumes (false) forwarding in both directions.
// While stopped, connections stay open and new ones are accepted but carry
// nothing: bytes wait in the kernel's buffers, as on a dead network path.
func (p *Proxy) SetBlackhole(on bool) {
	p.update(func(f *Faults) { f.Blackhole = on }, Up, Down)
}

// SetFaults sets what the proxy does to bytes going in direction d, on open
// connections and new ones alike.
func (p *Proxy) SetFaults(d Direction, f Faults) {
	p.update(func(old *Faults) { *old = f }, d)
}

func (p *Proxy) update(change func(*Faults), dirs ...Direction) {
	p.mu.Lock()
	for _, d := range dirs {
		change(&p.faults[d])
	}
	p.mu.Unlock()
	p.cond.Broadcast()
}

// SetIdleTimeout makes the proxy close (with a reset) every connection that
// has carried nothing either way for d; zero turns that off.
func (p *Proxy) SetIdleTimeout(d time.Duration) {
	p.mu.Lock()
	p.idle = d
	p.mu.Unlock()
}

// Open is the number of connections open through the proxy now.
func (p *Proxy) Open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pairs)
}

// Reset closes every open connection, both sides, with a TCP reset.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for pr := range p.pairs {
		reset(pr)
	}
}

func reset(pr *pair) {
	for _, c := range []net.Conn{pr.in, pr.out} {
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
	if !p.closed {
		p.closed = true
		close(p.stop)
	}
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
		pr := &pair{in: in, out: out, last: time.Now()}
		if !p.track(pr) {
			return
		}
		p.wg.Add(1)
		go p.pipe(pr)
	}
}

// janitor closes connections idle for longer than the idle timeout.
func (p *Proxy) janitor() {
	defer p.wg.Done()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		p.mu.Lock()
		if p.idle > 0 {
			for pr := range p.pairs {
				if pr.idleFor() > p.idle {
					reset(pr)
				}
			}
		}
		p.mu.Unlock()
	}
}

func (p *Proxy) track(pr *pair) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		pr.in.Close()
		pr.out.Close()
		return false
	}
	p.pairs[pr] = struct{}{}
	return true
}

// pipe copies both ways until both directions are done.
func (p *Proxy) pipe(pr *pair) {
	defer p.wg.Done()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.forward(Up, pr, pr.out, pr.in) }()
	go func() { defer wg.Done(); p.forward(Down, pr, pr.in, pr.out) }()
	wg.Wait()
	p.mu.Lock()
	delete(p.pairs, pr)
	p.mu.Unlock()
	pr.in.Close()
	pr.out.Close()
}

// chunk is what the reader read, and when; err is set on the last one.
type chunk struct {
	data []byte
	at   time.Time
	err  error
}

// queueChunks is how many chunks of up to 32 KiB a direction holds between
// its reader and its writer: 8 MiB, so a delay of 25 ms still passes
// 300 MB/s. A delay is latency; a short queue would make it a cap on
// throughput too (16 chunks passed 20 MB/s).
const queueChunks = 256

// forward moves bytes from src to dst in direction d: a reader goroutine
// queues chunks, this one writes them out with the direction's faults. An
// EOF half-closes dst; any other error closes both.
func (p *Proxy) forward(d Direction, pr *pair, dst, src net.Conn) {
	queue := make(chan chunk, queueChunks)
	done := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(done)
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(queue)
		for {
			// While blackholed, read nothing: bytes wait in the kernel.
			if _, ok := p.wait(d); !ok {
				return
			}
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				pr.touch()
			}
			select {
			case queue <- chunk{data: buf[:n], at: time.Now(), err: err}:
			case <-done:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range queue {
		if len(c.data) > 0 {
			if err := p.write(d, pr, dst, c); err != nil {
				src.Close()
				dst.Close()
				return
			}
		}
		if c.err == nil {
			continue
		}
		// A close is news too: a blackhole and a delay hold it back.
		if err := p.hold(d, c.at); err != nil {
			return
		}
		if errors.Is(c.err, io.EOF) {
			if tc, ok := dst.(*net.TCPConn); ok {
				tc.CloseWrite()
				return
			}
		}
		src.Close()
		dst.Close()
		return
	}
}

var errClosed = errors.New("faultproxy: closed")

// hold waits until a chunk read at `at` may go: not blackholed, its delay
// passed. It returns the faults in force then.
func (p *Proxy) hold(d Direction, at time.Time) error {
	for {
		f, ok := p.wait(d)
		if !ok {
			return errClosed
		}
		wait := time.Until(at.Add(f.Delay))
		if wait <= 0 {
			return nil
		}
		if !p.sleep(min(wait, 10*time.Millisecond)) {
			return errClosed
		}
	}
}

// write forwards one chunk with the direction's faults.
func (p *Proxy) write(d Direction, pr *pair, dst net.Conn, c chunk) error {
	data := c.data
	for len(data) > 0 {
		if err := p.hold(d, c.at); err != nil {
			return err
		}
		f, _ := p.wait(d)
		n := len(data)
		if f.Slice > 0 {
			n = min(n, f.Slice)
		}
		if f.Rate > 0 {
			// At most a tenth of a second's worth at a time, then wait
			// for the time that many bytes take at the rate.
			n = min(n, max(f.Rate/10, 1))
		}
		if _, err := dst.Write(data[:n]); err != nil {
			return err
		}
		pr.touch()
		data = data[n:]
		var pause time.Duration
		if f.Rate > 0 {
			pause = time.Duration(n) * time.Second / time.Duration(f.Rate)
		}
		if f.Slice > 0 && len(data) > 0 {
			pause = max(pause, f.SliceGap)
		}
		if pause > 0 && !p.sleep(pause) {
			return errClosed
		}
	}
	return nil
}

// wait waits while direction d is blackholed and returns its faults; false
// once the proxy is closed.
func (p *Proxy) wait(d Direction) (Faults, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.faults[d].Blackhole && !p.closed {
		p.cond.Wait()
	}
	return p.faults[d], !p.closed
}

// sleep waits d; false if the proxy closed meanwhile.
func (p *Proxy) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-p.stop:
		return false
	}
}
