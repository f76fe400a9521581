package tunnel

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"strconv"
	"testing"
)

// BenchmarkEcho sends 1 KiB round trips through a stream, plain and over
// TLS, with an echo at the accepting end, and reports the process's read
// system calls per round trip (both ends, from /proc/self/io) beside the
// time.
func BenchmarkEcho(b *testing.B) {
	for _, useTLS := range []bool{false, true} {
		name := "plain"
		if useTLS {
			name = "tls"
		}
		b.Run(name, func(b *testing.B) {
			st := echoStream(b, useTLS)
			before := readSyscalls()
			b.ResetTimer()
			echoes(b, st, b.N)
			b.StopTimer()
			if n := readSyscalls() - before; n > 0 {
				b.ReportMetric(float64(n)/float64(b.N), "reads/op")
			}
		})
	}
}

// TestPlainEchoReadCount: over a plain socket, a 1 KiB round trip costs
// six reads in the process: each end's read loop reads a frame's header
// into its own slice (holding no buffer while it waits), then the body.
// (The hub once waited for its socket to be readable and read a small
// frame whole, four reads; decision 015 says why that went.)
func TestPlainEchoReadCount(t *testing.T) {
	if readSyscalls() == 0 {
		t.Skip("no /proc/self/io here")
	}
	st := echoStream(t, false)
	echoes(t, st, 100) // past the stream's opening
	const n = 2000
	before := readSyscalls()
	echoes(t, st, n)
	if per := float64(readSyscalls()-before) / n; per > 6.5 {
		t.Errorf("%.2f read system calls per 1 KiB round trip, want at most 6", per)
	}
}

// echoStream opens a stream of a new session pair, plain or TLS, whose
// accepting end echoes what it reads.
func echoStream(tb testing.TB, useTLS bool) net.Conn {
	tb.Helper()
	client, server := pair(tb, useTLS)
	server.Handle(func(c net.Conn) {
		defer c.Close()
		io.Copy(c, c)
	})
	st, err := client.Open(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	return st
}

// echoes sends n 1 KiB round trips through st.
func echoes(tb testing.TB, st net.Conn, n int) {
	tb.Helper()
	msg := bytes.Repeat([]byte("x"), 1<<10)
	got := make([]byte, len(msg))
	for range n {
		if _, err := st.Write(msg); err != nil {
			tb.Fatal(err)
		}
		if _, err := io.ReadFull(st, got); err != nil {
			tb.Fatal(err)
		}
	}
}

// readSyscalls is the process's read system calls so far, or 0 where
// /proc/self/io isn't there.
func readSyscalls() int64 {
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0
	}
	for _, line := range bytes.Split(data, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("syscr: ")); ok {
			n, _ := strconv.ParseInt(string(v), 10, 64)
			return n
		}
	}
	return 0
}
