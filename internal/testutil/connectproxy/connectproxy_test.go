package connectproxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestTunnels: a CONNECT reaches the target and carries bytes both ways;
// anything else is refused.
func TestTunnels(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c)
	}()
	p := Start(t)
	c, err := net.Dial("tcp", p.URL.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "CONNECT "+ln.Addr().String()+" HTTP/1.1\r\nHost: "+ln.Addr().String()+"\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT answered %v, %v", resp, err)
	}
	io.WriteString(c, "ping")
	got := make([]byte, 4)
	if _, err := io.ReadFull(br, got); err != nil || string(got) != "ping" {
		t.Fatalf("read %q, %v through the tunnel", got, err)
	}
	if p.Tunnelled() != 1 {
		t.Errorf("Tunnelled() = %d, want 1", p.Tunnelled())
	}
	resp, err = http.Get(p.URL.String())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("a GET to the proxy answered %d, want 405", resp.StatusCode)
	}
	http.DefaultClient.CloseIdleConnections()
}
