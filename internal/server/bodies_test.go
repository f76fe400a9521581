package server

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/testutil/fakecluster"
)

// TestUnsentBodyHoldsNothing: a client that declares a body and never
// sends it, without signing in, gets its answer and its connection closes.
// net/http reads what a handler left of a body before it answers, and the
// hub's server has no read deadline (watches last for hours): such a
// client held a connection and its goroutine for as long as it liked, and
// a few thousand of them the hub's file descriptors. A person's request
// to a cluster still keeps its connection.
func TestUnsentBodyHoldsNothing(t *testing.T) {
	fc := fakecluster.New(t)
	h, _ := proxyHub(t, fc, "", func(c *Config) { c.FormTimeout = 200 * time.Millisecond })
	for _, tc := range []struct {
		request string
		want    int
	}{
		{"POST /clusters/open/api/v1/namespaces/a/configmaps", http.StatusUnauthorized},
		{"POST /clusters/nowhere/api/v1/namespaces/a/configmaps", http.StatusUnauthorized},
		{"GET /api/clusters", http.StatusUnauthorized},
		{"POST /api/clusters", http.StatusMethodNotAllowed},
		{"POST /nowhere", http.StatusNotFound},
		{"POST /logout", http.StatusSeeOther},
		// The sign-in form is read, for a while.
		{"POST /login", http.StatusUnauthorized},
	} {
		conn, err := net.Dial("tcp", h.srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		// Far more than the hub waits for anything: a bound, not a timing.
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(conn, "%s HTTP/1.1\r\nHost: hub\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000\r\n\r\n", tc.request)
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Errorf("%s with a body it never sends: no answer (%v)", tc.request, err)
			continue
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: %d, want %d", tc.request, resp.StatusCode, tc.want)
		}
		if _, err := br.ReadByte(); errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("%s: the hub kept the connection open after its answer", tc.request)
		}
	}

	conn, err := net.Dial("tcp", h.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(conn, "POST /clusters/open/api/v1/namespaces/a/configmaps HTTP/1.1\r\nHost: hub\r\nAuthorization: Bearer %s\r\nContent-Length: 2\r\n\r\n{}", aliceToken)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Errorf("a person's POST: %d, Connection: close %v; want 200 on a connection kept", resp.StatusCode, resp.Close)
	}
}
