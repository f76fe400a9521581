package faultproxy

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"
)

// dialEcho starts a proxy in front of an echo server and connects to it.
func dialEcho(t *testing.T) (*Proxy, net.Conn) {
	t.Helper()
	p, err := New(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return p, c
}

// roundTrip sends msg and reads its echo, and says how long that took.
func roundTrip(t *testing.T, c net.Conn, msg []byte) time.Duration {
	t.Helper()
	start := time.Now()
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("echo: %v", err)
	}
	c.SetReadDeadline(time.Time{})
	if !bytes.Equal(got, msg) {
		t.Fatalf("echo differs: %d bytes, want %d", len(got), len(msg))
	}
	return time.Since(start)
}

func TestBlackholeOneDirection(t *testing.T) {
	for _, d := range []Direction{Up, Down} {
		p, c := dialEcho(t)
		roundTrip(t, c, []byte("warm"))
		p.SetFaults(d, Faults{Blackhole: true})
		c.Write([]byte("held"))
		c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if n, err := c.Read(make([]byte, 4)); n != 0 || !isTimeout(err) {
			t.Fatalf("direction %d: read %d bytes, %v through a blackhole", d, n, err)
		}
		p.SetFaults(d, Faults{})
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		got := make([]byte, 4)
		if _, err := io.ReadFull(c, got); err != nil || string(got) != "held" {
			t.Fatalf("direction %d: after the blackhole %q, %v", d, got, err)
		}
	}
}

// TestBlackholeUpStillForwardsDown: with only the way up cut, what the
// target sends still arrives.
func TestBlackholeUpStillForwardsDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p, err := New(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p.SetFaults(Up, Faults{Blackhole: true})
	c.Write([]byte("up"))
	s.Write([]byte("down"))
	got := make([]byte, 4)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "down" {
		t.Fatalf("down through an up blackhole: %q, %v", got, err)
	}
	s.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, err := s.Read(got); n != 0 || !isTimeout(err) {
		t.Fatalf("the target read %d bytes, %v sent into the blackhole", n, err)
	}
}

func TestDelayIsLatency(t *testing.T) {
	p, c := dialEcho(t)
	base := roundTrip(t, c, []byte("x"))
	const delay = 150 * time.Millisecond
	p.SetFaults(Up, Faults{Delay: delay})
	p.SetFaults(Down, Faults{Delay: delay})
	rt := roundTrip(t, c, []byte("x"))
	if rt < 2*delay {
		t.Fatalf("round trip %s with %s each way (%s without)", rt, delay, base)
	}
	// Ten messages sent one after another each wait the delay, not ten
	// delays: the last comes back a round trip after it was sent, not
	// behind the nine before it. Timed from the last write, so that a
	// slow machine's stretched sleeps don't count.
	var last time.Time
	for range 10 {
		c.Write([]byte("y"))
		last = time.Now()
		time.Sleep(5 * time.Millisecond)
	}
	got := make([]byte, 10)
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(last); took > rt+3*delay {
		t.Fatalf("the last of 10 pipelined messages came back %s after it was sent, the round trip being %s: the delay adds up instead of overlapping", took, rt)
	}
}

func TestThrottle(t *testing.T) {
	p, c := dialEcho(t)
	msg := bytes.Repeat([]byte("t"), 64<<10)
	fast := roundTrip(t, c, msg)
	const rate = 256 << 10 // 64 KiB takes a quarter second
	p.SetFaults(Down, Faults{Rate: rate})
	slow := roundTrip(t, c, msg)
	if want := time.Duration(len(msg)) * time.Second / rate; slow < want*8/10 {
		t.Fatalf("64 KiB at %d B/s took %s, want about %s (%s unthrottled)", rate, slow, want, fast)
	}
}

func TestSliceWritesSmallPieces(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p, err := New(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.SetFaults(Up, Faults{Slice: 3, SliceGap: 5 * time.Millisecond})
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	msg := []byte("a message of thirty-two bytes...")
	c.Write(msg)
	c.(*net.TCPConn).CloseWrite()
	var got []byte
	buf := make([]byte, 1024)
	reads := 0
	for {
		n, err := s.Read(buf)
		if n > 3 {
			t.Fatalf("read %d bytes at once through slices of 3", n)
		}
		got = append(got, buf[:n]...)
		if n > 0 {
			reads++
		}
		if err != nil {
			break
		}
	}
	if !bytes.Equal(got, msg) || reads < len(msg)/3 {
		t.Fatalf("got %q in %d reads", got, reads)
	}
}

func TestIdleTimeoutClosesOnlyIdleConnections(t *testing.T) {
	p, idle := dialEcho(t)
	busy, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	roundTrip(t, idle, []byte("hi"))
	// Long enough that a loaded machine's late wakes (a 50 ms sleep took
	// up to 316 ms) don't leave busy silent for a whole timeout.
	const timeout = time.Second
	p.SetIdleTimeout(timeout)
	// busy talks every timeout/10 for 3 timeouts: it must stay open.
	for range 30 {
		roundTrip(t, busy, []byte("ping"))
		time.Sleep(timeout / 10)
	}
	idle.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := idle.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("the idle connection: %v, want it closed", err)
	}
	roundTrip(t, busy, []byte("still here"))
}

func TestCloseWithTrafficHeld(t *testing.T) {
	p, c := dialEcho(t)
	p.SetFaults(Down, Faults{Delay: time.Hour})
	c.Write([]byte("never"))
	p.SetFaults(Up, Faults{Blackhole: true})
	c.Write([]byte("held"))
	p.Close() // returns although a copier waits out a delay and one a blackhole
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("the connection outlived its proxy")
	}
}
