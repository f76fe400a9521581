package recording

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"net/http"
	"testing"

	"github.com/moby/spdystream/spdy"
)

// wsFrame is one RFC 6455 frame: fin set, masked with key when given.
func wsFrame(op byte, fin bool, payload []byte, key []byte) []byte {
	b0 := op
	if fin {
		b0 |= 0x80
	}
	var b []byte
	mask := byte(0)
	if key != nil {
		mask = 0x80
	}
	switch n := len(payload); {
	case n < 126:
		b = []byte{b0, mask | byte(n)}
	case n < 1<<16:
		b = []byte{b0, mask | 126, 0, 0}
		binary.BigEndian.PutUint16(b[2:], uint16(n))
	default:
		b = []byte{b0, mask | 127, 0, 0, 0, 0, 0, 0, 0, 0}
		binary.BigEndian.PutUint64(b[2:], uint64(n))
	}
	if key == nil {
		return append(b, payload...)
	}
	b = append(b, key...)
	for i, c := range payload {
		b = append(b, c^key[i&3])
	}
	return b
}

// channelMsg is a binary message of channel ch, as client-go sends it.
func channelMsg(ch byte, data string, key []byte) []byte {
	return wsFrame(2, true, append([]byte{ch}, data...), key)
}

type got struct {
	ch   int
	data string
}

func collect(t *testing.T, feed func([]byte, func(int, []byte)) error, stream []byte, step int) []got {
	t.Helper()
	var out []got
	for len(stream) > 0 {
		n := min(step, len(stream))
		if err := feed(stream[:n], func(ch int, d []byte) {
			if k := len(out) - 1; k >= 0 && out[k].ch == ch && step < 1000 {
				out[k].data += string(d) // pieces of one message, fed bytewise
				return
			}
			out = append(out, got{ch, string(d)})
		}); err != nil {
			t.Fatal(err)
		}
		stream = stream[n:]
	}
	return out
}

func TestWebSocketParser(t *testing.T) {
	key := []byte{1, 2, 3, 4}
	var client []byte
	client = append(client, channelMsg(4, `{"Width":120,"Height":40}`, key)...)
	client = append(client, wsFrame(9, true, []byte("ping"), key)...) // control: ignored
	client = append(client, channelMsg(0, "ls\r", key)...)
	// A message in two frames: the channel byte is in the first only.
	client = append(client, wsFrame(2, false, []byte{0, 'e', 'x'}, key)...)
	client = append(client, wsFrame(0, true, []byte("it\r"), key)...)
	long := bytes.Repeat([]byte("x"), 70000) // a 64-bit length
	server := append(channelMsg(1, "file\r\n", nil), channelMsg(1, string(long), nil)...)
	server = append(server, channelMsg(3, `{"status":"Success"}`, nil)...)
	server = append(server, wsFrame(8, true, nil, nil)...)

	for _, step := range []int{1, 7, 1 << 20} {
		c := collect(t, newWSParser(false).feed, client, step)
		want := []got{{4, `{"Width":120,"Height":40}`}, {0, "ls\r"}, {0, "ex"}, {0, "it\r"}}
		if step < 1000 {
			want = []got{{4, `{"Width":120,"Height":40}`}, {0, "ls\rexit\r"}}
		}
		if !equalGot(c, want) {
			t.Errorf("step %d: client %v, want %v", step, c, want)
		}
		s := collect(t, newWSParser(false).feed, server, step)
		out := ""
		for _, g := range s {
			if g.ch == 1 {
				out += g.data
			}
		}
		if out != "file\r\n"+string(long) || s[len(s)-1] != (got{3, `{"status":"Success"}`}) {
			t.Errorf("step %d: server's stdout %d bytes, last %v", step, len(out), s[len(s)-1])
		}
	}
}

func equalGot(a, b []got) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestWebSocketBase64(t *testing.T) {
	msg := wsFrame(1, true, []byte("1"+base64.StdEncoding.EncodeToString([]byte("héllo"))), nil)
	s := collect(t, newWSParser(true).feed, msg, 1<<20)
	if len(s) != 1 || s[0] != (got{1, "héllo"}) {
		t.Errorf("got %v", s)
	}
}

func TestWebSocketFrameTooLarge(t *testing.T) {
	b := []byte{0x82, 127, 0, 0, 0, 0, 0x10, 0, 0, 0}
	if err := newWSParser(false).feed(b, func(int, []byte) {}); err == nil {
		t.Fatal("a 256 MiB frame was taken")
	}
}

// spdySession writes, with spdystream's own Framer, what kubectl's SPDY
// exec sends (client) and gets (server).
func spdySession(t testing.TB) (client, server []byte) {
	t.Helper()
	var cb, sb bytes.Buffer
	cf, err := spdy.NewFramer(&cb, nil)
	if err != nil {
		t.Fatal(err)
	}
	sf, err := spdy.NewFramer(&sb, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, typ := range []string{"error", "stdin", "stdout", "resize"} {
		h := http.Header{}
		h.Set("streamtype", typ)
		if err := cf.WriteFrame(&spdy.SynStreamFrame{StreamId: spdy.StreamId(2*i + 1), Headers: h}); err != nil {
			t.Fatal(err)
		}
		if err := sf.WriteFrame(&spdy.SynReplyFrame{StreamId: spdy.StreamId(2*i + 1), Headers: http.Header{}}); err != nil {
			t.Fatal(err)
		}
	}
	cf.WriteFrame(&spdy.DataFrame{StreamId: 7, Data: []byte("{\"Width\":100,\"Height\":30}\n")})
	cf.WriteFrame(&spdy.DataFrame{StreamId: 3, Data: []byte("id\r")})
	sf.WriteFrame(&spdy.DataFrame{StreamId: 5, Data: []byte("uid=0(root)\r\n")})
	sf.WriteFrame(&spdy.PingFrame{Id: 1})
	return cb.Bytes(), sb.Bytes()
}

func TestSPDYParser(t *testing.T) {
	client, server := spdySession(t)
	for _, step := range []int{1, 5, 1 << 20} {
		streams := &spdyStreams{}
		cp, err := newSPDYParser(streams)
		if err != nil {
			t.Fatal(err)
		}
		sp, _ := newSPDYParser(streams)
		c := collect(t, cp.feed, client, step)
		s := collect(t, sp.feed, server, step)
		wantC := []got{{chanResize, "{\"Width\":100,\"Height\":30}\n"}, {chanStdin, "id\r"}}
		if !equalGot(c, wantC) {
			t.Errorf("step %d: client %v, want %v", step, c, wantC)
		}
		if !equalGot(s, []got{{chanStdout, "uid=0(root)\r\n"}}) {
			t.Errorf("step %d: server %v", step, s)
		}
	}
}

func TestProtocolOf(t *testing.T) {
	for _, c := range []struct {
		up, sub string
		want    Protocol
		ok      bool
	}{
		{"websocket", "v5.channel.k8s.io", WebSocket, true},
		{"WebSocket", "channel.k8s.io", WebSocket, true},
		{"websocket", "base64.channel.k8s.io", WebSocketBase64, true},
		{"SPDY/3.1", "", SPDY, true},
		{"websocket", "SPDY/3.1+portforward.k8s.io", 0, false},
		{"h2c", "", 0, false},
	} {
		p, ok := ProtocolOf(c.up, c.sub)
		if p != c.want || ok != c.ok {
			t.Errorf("ProtocolOf(%q, %q) = %v, %v; want %v, %v", c.up, c.sub, p, ok, c.want, c.ok)
		}
	}
}
