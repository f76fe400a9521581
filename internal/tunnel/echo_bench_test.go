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
			client, server := pair(b, useTLS)
			server.Handle(func(c net.Conn) {
				defer c.Close()
				io.Copy(c, c)
			})
			st, err := client.Open(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			msg := bytes.Repeat([]byte("x"), 1<<10)
			got := make([]byte, len(msg))
			before := readSyscalls(b)
			b.ResetTimer()
			for range b.N {
				if _, err := st.Write(msg); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(st, got); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if n := readSyscalls(b) - before; n > 0 {
				b.ReportMetric(float64(n)/float64(b.N), "reads/op")
			}
		})
	}
}

// readSyscalls is the process's read system calls so far, or 0 where
// /proc/self/io isn't there.
func readSyscalls(b *testing.B) int64 {
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
