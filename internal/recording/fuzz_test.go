package recording

import (
	"testing"
)

func FuzzWebSocketParser(f *testing.F) {
	key := []byte{9, 8, 7, 6}
	f.Add(channelMsg(0, "ls\r", key), uint8(3), false)
	f.Add(append(wsFrame(2, false, []byte{1, 'a'}, nil), wsFrame(0, true, []byte("b"), nil)...), uint8(1), false)
	f.Add(wsFrame(1, true, []byte("1aGk="), nil), uint8(2), true)
	f.Fuzz(func(t *testing.T, b []byte, step uint8, b64 bool) {
		p := newWSParser(b64)
		n := int(step) + 1
		total := 0
		for len(b) > 0 {
			k := min(n, len(b))
			if err := p.feed(b[:k], func(ch int, d []byte) { total += len(d) }); err != nil {
				return
			}
			b = b[k:]
		}
		if len(p.buf) > maxFrame+14 {
			t.Fatalf("holds %d bytes", len(p.buf))
		}
	})
}

func FuzzSPDYParser(f *testing.F) {
	c, s := spdySession(f)
	f.Add(c, uint8(255))
	f.Add(s, uint8(4))
	f.Fuzz(func(t *testing.T, b []byte, step uint8) {
		p, err := newSPDYParser(&spdyStreams{})
		if err != nil {
			t.Fatal(err)
		}
		n := int(step) + 1
		for len(b) > 0 {
			k := min(n, len(b))
			if err := p.feed(b[:k], func(int, []byte) {}); err != nil {
				return
			}
			b = b[k:]
		}
		if len(p.buf) > maxFrame+8 {
			t.Fatalf("holds %d bytes", len(p.buf))
		}
	})
}
