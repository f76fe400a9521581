package tunnel

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (a, b *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-accepted
	if s == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

// sunk is what the read loop has written straight into st's socket so far.
func sunk(st net.Conn) int64 {
	s := st.(*stream)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sunk
}

// TestWriteTo: io.Copy from a stream hands every byte on in order, through
// a socket read at once, one read slowly (so the read loop's writes are cut
// short and the rest waits in WriteTo), and a writer that is no socket.
// With a socket read at once the read loop writes the data itself.
func TestWriteTo(t *testing.T) {
	payload := make([]byte, 24<<20)
	rand.Read(payload)
	want := sha256.Sum256(payload)
	for _, tc := range []struct {
		name   string
		socket bool
		slow   bool
	}{
		{"socket", true, false},
		{"slow socket", true, true},
		{"not a socket", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, s := pair(t, false)
			out := open(t, c)
			go func() {
				out.Write(payload)
				out.(interface{ CloseWrite() error }).CloseWrite()
			}()
			in := accept(t, s)
			var dst io.Writer
			var got func() ([]byte, error)
			if tc.socket {
				w, r := tcpPair(t)
				if tc.slow {
					w.SetWriteBuffer(32 << 10)
					r.SetReadBuffer(32 << 10)
				}
				dst = w
				got = func() ([]byte, error) {
					var b bytes.Buffer
					buf := make([]byte, 32<<10)
					for {
						n, err := r.Read(buf)
						b.Write(buf[:n])
						if tc.slow && b.Len()%(1<<20) < n {
							time.Sleep(10 * time.Millisecond)
						}
						if errors.Is(err, io.EOF) {
							return b.Bytes(), nil
						}
						if err != nil {
							return b.Bytes(), err
						}
					}
				}
				defer w.CloseWrite()
			} else {
				pr, pw := io.Pipe()
				dst = pw
				got = func() ([]byte, error) { return io.ReadAll(pr) }
				defer pw.Close()
			}
			read := make(chan []byte, 1)
			go func() {
				b, err := got()
				if err != nil {
					t.Error(err)
				}
				read <- b
			}()
			type result struct {
				n   int64
				err error
			}
			copied := make(chan result, 1)
			go func() {
				n, err := io.Copy(dst, in)
				copied <- result{n, err}
			}()
			var direct int64
			if tc.socket && !tc.slow {
				waitFor(t, "the read loop to write into the socket", func() bool {
					direct = sunk(in)
					return direct > 0
				})
			}
			if r := <-copied; r.err != nil || r.n != int64(len(payload)) {
				t.Fatalf("io.Copy = %d, %v; want %d, nil", r.n, r.err, len(payload))
			}
			switch w := dst.(type) {
			case *net.TCPConn:
				w.CloseWrite()
			case *io.PipeWriter:
				w.Close()
			}
			if b := <-read; sha256.Sum256(b) != want {
				t.Fatalf("the reader got %d bytes, not the %d sent", len(b), len(payload))
			}
			if tc.socket && !tc.slow {
				t.Logf("the read loop wrote at least %d of %d bytes itself", direct, len(payload))
			}
			in.Close()
			out.Close()
			noStreams(t, c, s)
		})
	}
}

// TestWriteToAStalledSocket: a stream copied into a socket nobody reads
// fills the socket, then its window, and stops its writer; the read loop
// goes on, so another stream still carries 16 MiB. Closing the socket ends
// the copy with an error.
func TestWriteToAStalledSocket(t *testing.T) {
	cfg := DefaultConfig()
	cfg.StreamWindow = 256 << 10
	c, s := pairWith(t, false, cfg)
	stalled := open(t, c)
	stalled.Write([]byte("x"))
	stalledIn := accept(t, s)
	w, _ := tcpPair(t) // the other end is never read
	copied := make(chan error, 1)
	go func() {
		_, err := io.Copy(w, stalledIn)
		copied <- err
	}()
	blocked := make(chan error, 1)
	go func() {
		chunk := make([]byte, 64<<10)
		stalled.SetWriteDeadline(time.Now().Add(10 * time.Second))
		for {
			if _, err := stalled.Write(chunk); err != nil {
				blocked <- err
				return
			}
		}
	}()

	payload := make([]byte, 16<<20)
	rand.Read(payload)
	out := open(t, c)
	go func() { out.Write(payload); out.(interface{ CloseWrite() error }).CloseWrite() }()
	in := accept(t, s)
	got, err := io.ReadAll(in)
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("the other stream read %d bytes, %v; want the 16 MiB sent", len(got), err)
	}
	select {
	case err := <-blocked:
		t.Fatalf("the stalled stream's writer stopped with %v while its socket was full; it should wait for window", err)
	default:
	}
	w.Close()
	if err := <-copied; err == nil {
		t.Error("io.Copy into a closed socket returned no error")
	}
	stalled.SetWriteDeadline(time.Now())
	<-blocked
	in.Close()
	out.Close()
	stalled.Close()
	stalledIn.Close()
	noStreams(t, c, s)
}
