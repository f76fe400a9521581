package tunnel

import (
	"io"
	"net"
	"testing"
)

// TestOnReadable: a stream read only when OnReadable says there is
// something gets every message, then its end, then the session's, with no
// goroutine parked on Read in between.
func TestOnReadable(t *testing.T) {
	for _, end := range []string{"fin", "session"} {
		t.Run(end, func(t *testing.T) {
			c, s := pair(t, false)
			st := open(t, c)
			if _, err := st.Write([]byte("first")); err != nil {
				t.Fatal(err)
			}
			peer := accept(t, s)
			calls := make(chan struct{}, 16)
			waitFor(t, "the first message to arrive", func() bool { return Ready(peer) })
			if !OnReadable(peer, func() { calls <- struct{}{} }) {
				t.Fatal("OnReadable refused a stream")
			}
			<-calls // it had something already
			buf := make([]byte, 5)
			if _, err := io.ReadFull(peer, buf); err != nil || string(buf) != "first" {
				t.Fatalf("read %q, %v; want first", buf, err)
			}
			if Ready(peer) {
				t.Fatal("Ready with nothing buffered")
			}
			if _, err := st.Write([]byte("again")); err != nil {
				t.Fatal(err)
			}
			<-calls
			if !Ready(peer) {
				t.Fatal("not Ready after OnReadable's call for data")
			}
			if _, err := io.ReadFull(peer, buf); err != nil || string(buf) != "again" {
				t.Fatalf("read %q, %v; want again", buf, err)
			}
			// Stopped, it calls no more; set again, it calls for what came.
			OnReadable(peer, nil)
			if _, err := st.Write([]byte("unseen")); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the third message to arrive", func() bool { return Ready(peer) })
			if len(calls) != 0 {
				t.Fatal("called after OnReadable(conn, nil)")
			}
			OnReadable(peer, func() { calls <- struct{}{} })
			<-calls
			if _, err := io.ReadFull(peer, make([]byte, 6)); err != nil {
				t.Fatal(err)
			}
			if end == "fin" {
				st.Close()
			} else {
				c.Close()
			}
			<-calls
			if !Ready(peer) {
				t.Fatalf("not Ready after the %s", end)
			}
			if n, err := peer.Read(buf); n != 0 || err == nil {
				t.Fatalf("read %d, %v after the %s; want an error", n, err, end)
			}
			if end == "fin" {
				if _, err := peer.Read(buf); err != io.EOF {
					t.Fatalf("read after a FIN: %v, want EOF", err)
				}
				s.Close()
				<-calls // the session's end
			}
		})
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if OnReadable(a, func() {}) || Ready(a) {
		t.Fatal("OnReadable or Ready took a conn that is not a stream")
	}
}
