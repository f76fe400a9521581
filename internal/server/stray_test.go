package server

import (
	"bufio"
	"io"
	"net/http"
	"testing"

	"github.com/tetherhq/tether/internal/testutil/fakecluster"
)

// TestAStrayAnswerNeverReachesAnotherPerson: the API server answers
// alice's request, then sends an answer no one asked for on the connection
// the hub would keep for the next request. Bob's request, next, gets its
// own answer. The stray comes once the connection is idle, and in the same
// write (one TLS record) as alice's answer.
func TestAStrayAnswerNeverReachesAnotherPerson(t *testing.T) {
	fc := fakecluster.New(t)
	const first = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst"
	const stray = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstray"
	sendStray := make(chan struct{})    // alice has her answer
	strayGone := make(chan struct{}, 1) // the hub closed the connection with the stray
	mux := fc.Srv.Config.Handler.(*http.ServeMux)
	mux.HandleFunc("/later", func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		io.WriteString(conn, first)
		<-sendStray
		io.WriteString(conn, stray)
		answerOnUntilClosed(brw.Reader, conn)
		strayGone <- struct{}{}
	})
	mux.HandleFunc("/with", func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		io.WriteString(conn, first+stray)
		answerOnUntilClosed(brw.Reader, conn)
	})
	mux.HandleFunc("/next", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "fresh") })
	h, _ := proxyHub(t, fc, "")

	// Once the connection is idle: the hub closes it as the stray comes.
	if code, body, _ := call(t, "GET", h.url+"/clusters/open/later", aliceToken, nil); code != 200 || body != "first" {
		t.Fatalf("alice: %d %q, want 200 \"first\"", code, body)
	}
	close(sendStray)
	<-strayGone
	if code, body, _ := call(t, "GET", h.url+"/clusters/open/next", bobToken, nil); body != "fresh" {
		t.Errorf("bob, after a stray answer on an idle connection: %d %q, want his own answer \"fresh\"", code, body)
	}

	// With alice's answer, read ahead along with it.
	if code, body, _ := call(t, "GET", h.url+"/clusters/open/with", aliceToken, nil); code != 200 || body != "first" {
		t.Fatalf("alice: %d %q, want 200 \"first\"", code, body)
	}
	if code, body, _ := call(t, "GET", h.url+"/clusters/open/next", bobToken, nil); body != "fresh" {
		t.Errorf("bob, after a stray answer sent with alice's: %d %q, want his own answer \"fresh\"", code, body)
	}
}

// answerOnUntilClosed answers each request that comes on a connection
// after a stray answer with "later", until the connection closes: a
// request that got the stray instead goes on to be answered.
func answerOnUntilClosed(r *bufio.Reader, w io.Writer) {
	for {
		if _, err := http.ReadRequest(r); err != nil {
			return
		}
		io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nlater")
	}
}
