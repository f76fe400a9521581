package agent

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/protocol"
)

// TestProxyOffCarriesOnlyTheHubsOwnStreams: an agent with TETHER_PROXY=false
// refuses a stream that doesn't begin with the hub's open message, as a
// person's TLS would, and dials nothing for it; one the hub marks as its own
// is relayed as before. Without the check in relay, the first case's bytes
// would reach the API server.
func TestProxyOffCarriesOnlyTheHubsOwnStreams(t *testing.T) {
	addr, conns := apiServer(t)
	var dials atomic.Int32
	a, err := New(Config{
		Options: Options{HubURL: &url.URL{Scheme: "https", Host: "hub.test"}, APIServer: addr, ProxyOff: true},
		DialAPIServer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	hub, agentSess := sessions(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	agentSess.Handle(func(st net.Conn) { a.relay(ctx, st) })

	tests := []struct {
		name  string
		first []byte // what the hub writes first on the stream
	}{
		{"a person's TLS", []byte("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")},
		{"an open message not marked own", frame(t, protocol.Message{Type: protocol.TypeOpen})},
		{"another message", frame(t, protocol.Message{Type: protocol.TypeDial})},
		{"an empty frame", []byte{0, 0, 0, 2, '{', '}'}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := hub.Open(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if _, err := st.Write(tt.first); err != nil {
				t.Fatal(err)
			}
			st.SetReadDeadline(time.Now().Add(10 * time.Second))
			m, err := protocol.Read(st)
			if err != nil {
				t.Fatalf("the agent's answer: %v", err)
			}
			if m.Type != protocol.TypeDial || m.Error != MessageProxyOff {
				t.Errorf("answer = %+v, want a dial error %q", m, MessageProxyOff)
			}
			// The agent closes it, with a reset when the hub's bytes
			// are still unread: either way it ends, and soon.
			var ne net.Error
			if _, err := io.ReadAll(st); errors.As(err, &ne) && ne.Timeout() {
				t.Errorf("the stream after the refusal: %v, want its end", err)
			}
			if n := dials.Load(); n != 0 {
				t.Errorf("the agent dialled its API server %d times for a stream it refused", n)
			}
		})
	}

	st, err := hub.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Write(frame(t, protocol.Message{Type: protocol.TypeOpen, Own: true})); err != nil {
		t.Fatal(err)
	}
	st.SetReadDeadline(time.Now().Add(10 * time.Second))
	if m, err := protocol.Read(st); err != nil || m.Type != protocol.TypeDial || m.Error != "" {
		t.Fatalf("the hub's own stream: answer %+v, %v; want a dial", m, err)
	}
	api := <-conns
	defer api.Close()
	if _, err := st.Write([]byte("GET /readyz")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len("GET /readyz"))
	api.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(api, got); err != nil || string(got) != "GET /readyz" {
		t.Fatalf("the API server read %q, %v", got, err)
	}
	if _, err := api.Write([]byte("ok")); err != nil {
		t.Fatal(err)
	}
	back := make([]byte, 2)
	if _, err := io.ReadFull(st, back); err != nil || string(back) != "ok" {
		t.Fatalf("the hub read %q, %v", back, err)
	}
}

func frame(t *testing.T, m protocol.Message) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := protocol.Write(&b, m); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}
