package tunnel

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"testing"
	"time"
)

// TestReadFrom: a stream's ReadFrom sends every byte in order, from a socket
// (read only once it has bytes), from a reader that is no socket, and from
// a socket through io.Copy, which wraps it in its WriteTo; from the
// client's end (which masks each frame) and the server's, over plain
// WebSocket and TLS.
func TestReadFrom(t *testing.T) {
	payload := make([]byte, 6<<20)
	rand.Read(payload)
	want := sha256.Sum256(payload)
	for _, useTLS := range []bool{false, true} {
		for _, fromClient := range []bool{true, false} {
			for _, from := range []string{"socket", "reader", "io.Copy from a socket"} {
				name := fmt.Sprintf("tls=%v client=%v %s", useTLS, fromClient, from)
				t.Run(name, func(t *testing.T) {
					c, s := pair(t, useTLS)
					if !fromClient {
						c, s = s, c
					}
					out := open(t, c)
					var src io.Reader = bytes.NewReader(payload)
					if from != "reader" {
						w, r := tcpPair(t)
						go func() {
							w.Write(payload)
							w.CloseWrite()
						}()
						src = r
					}
					type result struct {
						n   int64
						err error
					}
					sent := make(chan result, 1)
					go func() {
						var n int64
						var err error
						if from == "io.Copy from a socket" {
							n, err = io.Copy(out, src)
						} else {
							n, err = out.(io.ReaderFrom).ReadFrom(src)
						}
						out.(interface{ CloseWrite() error }).CloseWrite()
						sent <- result{n, err}
					}()
					got, err := io.ReadAll(accept(t, s))
					if err != nil {
						t.Fatal(err)
					}
					r := <-sent
					if r.err != nil || r.n != int64(len(payload)) {
						t.Errorf("copied %d bytes into the stream, %v; want %d, nil", r.n, r.err, len(payload))
					}
					if sha256.Sum256(got) != want {
						t.Errorf("received %d bytes that differ from the %d sent", len(got), len(payload))
					}
				})
			}
		}
	}
}

// TestReadFromHoldsNoBufferWhileIdle: streams copying from sockets that send
// nothing, as an agent's watches between events, hold no frame buffer each;
// the agent's copy through a buffer of its own held 256 KiB per stream.
func TestReadFromHoldsNoBufferWhileIdle(t *testing.T) {
	const streams = 100
	c, s := pair(t, false)
	heap := func() uint64 {
		runtime.GC()
		runtime.GC() // the pools' victim caches too
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	srcs := make([]*net.TCPConn, streams)
	done := make(chan error, streams)
	for i := range srcs {
		out := open(t, c)
		w, r := tcpPair(t)
		srcs[i] = w
		go func() {
			_, err := out.(io.ReaderFrom).ReadFrom(r)
			done <- err
		}()
	}
	// A first byte through each: every copy has read once, and waits for
	// the next.
	ins := make([]net.Conn, streams)
	for i := range ins {
		srcs[i].Write([]byte("!"))
		ins[i] = accept(t, s)
		if _, err := io.ReadFull(ins[i], make([]byte, 1)); err != nil {
			t.Fatal(err)
		}
	}
	grown := int64(heap()) - int64(before)
	if perStream := grown / streams; perStream > 8<<10 {
		t.Errorf("%d idle copies into streams grew the heap by %d KiB, %d KiB each; want no buffer each (a read's is 256 KiB)", streams, grown>>10, perStream>>10)
	}
	// They are alive: what a source sends arrives.
	srcs[streams/2].Write([]byte("event"))
	buf := make([]byte, 5)
	if _, err := io.ReadFull(ins[streams/2], buf); err != nil || string(buf) != "event" {
		t.Fatalf("read %q, %v; want the source's bytes", buf, err)
	}
	for _, w := range srcs {
		w.CloseWrite()
	}
	for range streams {
		if err := <-done; err != nil {
			t.Errorf("a copy ended with %v at its source's EOF", err)
		}
	}
}

// TestReadFromWaitsForWindow: with a peer that reads nothing, a stream's
// ReadFrom reads no further ahead of what the window let it send than one
// read, and the stream's write deadline ends the wait.
func TestReadFromWaitsForWindow(t *testing.T) {
	c, s := pair(t, false)
	out := open(t, c)
	accept(t, s) // and never read
	src := &countingReader{}
	out.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
	n, err := out.(io.ReaderFrom).ReadFrom(src)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("ReadFrom into a stream nobody reads: %v; want the write deadline's error", err)
	}
	// The window may have grown once, while the reader seemed to keep up
	// with the first 256 KiB.
	if cfg := DefaultConfig(); n < int64(cfg.StreamWindow) || n > 2*int64(cfg.StreamWindow) || src.n-n > maxFrame {
		t.Errorf("sent %d bytes and read %d from the source; want the window (%d, or twice that) sent, and at most one read (%d) more read", n, src.n, cfg.StreamWindow, maxFrame)
	}
}

// countingReader gives zeros without end, counting them.
type countingReader struct{ n int64 }

func (r *countingReader) Read(p []byte) (int, error) {
	r.n += int64(len(p))
	return len(p), nil
}

// TestReadFromEnds: a stream's ReadFrom returns the error that stopped it:
// the peer's reset, or its source's failure.
func TestReadFromEnds(t *testing.T) {
	t.Run("peer resets", func(t *testing.T) {
		c, s := pair(t, false)
		out := open(t, c)
		in := accept(t, s)
		w, r := tcpPair(t)
		copied := make(chan error, 1)
		go func() {
			_, err := out.(io.ReaderFrom).ReadFrom(r)
			copied <- err
		}()
		w.Write([]byte("unread"))
		waitFor(t, "the bytes to arrive", func() bool { return Ready(in) })
		in.Close() // with data unread: a reset
		for give := time.Now().Add(10 * time.Second); time.Now().Before(give); {
			// The next read's frame finds the stream reset.
			if _, err := w.Write([]byte("more")); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-copied:
				if !errors.Is(err, ErrStreamReset) {
					t.Errorf("ReadFrom into a stream the peer reset: %v; want ErrStreamReset", err)
				}
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
		t.Fatal("ReadFrom went on for 10 s into a stream the peer reset")
	})
	t.Run("source closed", func(t *testing.T) {
		c, s := pair(t, false)
		out := open(t, c)
		accept(t, s)
		_, r := tcpPair(t)
		copied := make(chan error, 1)
		go func() {
			_, err := out.(io.ReaderFrom).ReadFrom(r)
			copied <- err
		}()
		waitParked(t, 1, "IO wait", inReadFrom, inPollWait) // waiting for bytes
		r.Close()
		if err := <-copied; !errors.Is(err, net.ErrClosed) {
			t.Errorf("ReadFrom a socket closed under it: %v; want net.ErrClosed", err)
		}
	})
}

// TestReadFromEndsWithItsStream: ReadFrom waiting on an idle source, after
// the peer's FIN, returns once the peer resets the stream or the session
// ends, rather than wait for the source to say something: the agent's relay
// would otherwise hold its API server connection, and the session's Close
// its handler, for as long as the API server keeps a half-closed
// connection open.
func TestReadFromEndsWithItsStream(t *testing.T) {
	for _, end := range []string{"reset", "session"} {
		t.Run(end, func(t *testing.T) {
			s, peer := rawPeer(t)
			framesFrom(peer)
			peer.Write(frame(header{typ: typeWindow, flags: flagSYN | flagFIN, stream: 2}))
			st := accept(t, s)
			src, _ := tcpPair(t) // says nothing
			done := make(chan error, 1)
			go func() {
				_, err := st.(io.ReaderFrom).ReadFrom(src)
				done <- err
			}()
			// ReadFrom waits on its idle source: the stream's end must
			// reach that read, not be found before it begins.
			waitParked(t, 1, "IO wait", inReadFrom, inPollWait)
			want := ErrStreamReset
			if end == "reset" {
				peer.Write(frame(header{typ: typeWindow, flags: flagRST, stream: 2}))
			} else {
				want = ErrClosed
				s.Close()
			}
			select {
			case err := <-done:
				if !errors.Is(err, want) {
					t.Errorf("ReadFrom = %v, want %v", err, want)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("ReadFrom still waits on its source after the stream's %s", end)
			}
		})
	}
}
