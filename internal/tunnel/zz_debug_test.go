package tunnel

import (
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestZZDebug(t *testing.T) {
	accepted := make(chan *Session, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, _ := Accept(w, r, DefaultConfig())
		accepted <- s
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	c, _, err := Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), DialOptions{}, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	buf := make([]byte, 1<<20)
	n := runtime.Stack(buf, true)
	t.Logf("%s", buf[:n])
	cancel()
	s := <-accepted
	defer s.Close()
	defer c.Close()
}
