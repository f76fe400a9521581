package recording

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
)

// maxFrame bounds one WebSocket frame's payload the parser holds: kubectl
// and the kubelet send at most 32 KiB a frame. A larger one stops the
// recording, not the session.
const maxFrame = 1 << 20

// ErrFrameTooLarge is the error of a frame past maxFrame.
var ErrFrameTooLarge = errors.New("frame too large to record")

// wsParser reads one direction of a Kubernetes channel WebSocket
// (channel.k8s.io, v4 and v5.channel.k8s.io, base64.channel.k8s.io): RFC
// 6455 frames whose messages begin with the channel's byte. It is fed the
// stream as it comes, in pieces of any size. Written here, not taken from
// a WebSocket library: those read only a connection they own, handshake
// and all, and answer pings; this one only watches bytes go by.
type wsParser struct {
	base64 bool
	buf    []byte // what is fed and not yet a whole frame
	// channel is the channel of the message in progress, for its
	// continuation frames; -1 when none.
	channel int
}

func newWSParser(base64 bool) *wsParser { return &wsParser{base64: base64, channel: -1} }

// feed parses what b completes, calling emit for each message's payload
// with its channel. b is not kept.
func (p *wsParser) feed(b []byte, emit func(channel int, data []byte)) error {
	p.buf = append(p.buf, b...)
	for {
		n, err := p.frame(emit)
		if err != nil {
			return err
		}
		if n == 0 {
			break
		}
		p.buf = p.buf[n:]
	}
	if len(p.buf) == 0 {
		p.buf = nil // the array goes, once a large frame is done
	}
	return nil
}

// frame parses the frame at the start of p.buf, returning its length, or
// 0 when it isn't all there yet.
func (p *wsParser) frame(emit func(int, []byte)) (int, error) {
	b := p.buf
	if len(b) < 2 {
		return 0, nil
	}
	fin, op := b[0]&0x80 != 0, b[0]&0x0f
	masked := b[1]&0x80 != 0
	n := uint64(b[1] & 0x7f)
	head := 2
	switch n {
	case 126:
		if len(b) < 4 {
			return 0, nil
		}
		n, head = uint64(binary.BigEndian.Uint16(b[2:])), 4
	case 127:
		if len(b) < 10 {
			return 0, nil
		}
		n, head = binary.BigEndian.Uint64(b[2:]), 10
	}
	if n > maxFrame {
		return 0, fmt.Errorf("websocket: %d bytes: %w", n, ErrFrameTooLarge)
	}
	var key []byte
	if masked {
		if len(b) < head+4 {
			return 0, nil
		}
		key = b[head : head+4]
		head += 4
	}
	end := head + int(n)
	if len(b) < end {
		return 0, nil
	}
	data := b[head:end]
	if masked {
		for i := range data {
			data[i] ^= key[i&3]
		}
	}
	switch {
	case op >= 8: // close, ping, pong: no terminal's data
		return end, nil
	case op == 0: // continuation of the message in progress
		if p.channel >= 0 && len(data) > 0 {
			p.emit(p.channel, data, emit)
		}
	default: // text or binary: a new message, its channel first
		p.channel = -1
		if len(data) == 0 {
			break
		}
		ch := int(data[0])
		if p.base64 {
			ch -= '0'
		}
		p.channel = ch
		if len(data) > 1 {
			p.emit(ch, data[1:], emit)
		}
	}
	if fin {
		p.channel = -1
	}
	return end, nil
}

func (p *wsParser) emit(ch int, data []byte, emit func(int, []byte)) {
	if !p.base64 {
		emit(ch, data)
		return
	}
	out := make([]byte, base64.StdEncoding.DecodedLen(len(data)))
	n, err := base64.StdEncoding.Decode(out, data)
	if err != nil {
		return // not base64: nothing a terminal showed
	}
	emit(ch, out[:n])
}
