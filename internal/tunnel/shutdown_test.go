package tunnel

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"
)

// TestSessionEndUnblocksManyStreams: when a session ends under many streams
// with reads waiting, every read returns and Close returns promptly (it
// waits for the handlers). yamux v0.1.2 took minutes here: its Stream.Read
// spins on a closed session until the session's Close reaches that stream
// (hashicorp/yamux#176), one by one under a lock the spinners fight over.
func TestSessionEndUnblocksManyStreams(t *testing.T) {
	client, server := pair(t, false)
	const n = 1000
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	accepted := make(chan struct{}, n)
	server.Handle(func(st net.Conn) {
		b := make([]byte, 1)
		st.Read(b) // the "x"
		accepted <- struct{}{}
		st.Read(b) // blocks until the session ends
	})
	for range n {
		st, err := client.Open(ctx)
		if err != nil {
			t.Fatal(err)
		}
		st.Write([]byte("x")) // so the server accepts it
		wg.Add(1)
		go func() { defer wg.Done(); st.Read(make([]byte, 1)) }()
	}
	for range n {
		<-accepted
	}
	// Every read, the client's and the handlers', waits on its stream.
	waitParked(t, 2*n, "select", inStreamRead)
	start := time.Now()
	server.Close()
	client.Close()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		t.Logf("%d streams' reads returned %s after both sessions closed", 2*n, time.Since(start).Round(time.Millisecond))
	case <-time.After(20 * time.Second):
		t.Fatalf("reads still blocked 20 s after the sessions closed")
	}
}
