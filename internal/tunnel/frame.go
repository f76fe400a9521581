package tunnel

import (
	"encoding/binary"
	"fmt"
)

// The wire format is yamux's (github.com/hashicorp/yamux/blob/master/spec.md),
// so either end may still be hashicorp/yamux: a 12-byte header of version,
// type, flags, stream ID and length, then, for data frames, length bytes.
// docs/protocol.md describes it; docs/decisions/010-multiplexer.md says why
// Tether has its own implementation.
const (
	headerSize   = 12
	protoVersion = 0
)

// Frame types.
const (
	typeData   uint8 = 0 // length bytes of stream data follow
	typeWindow uint8 = 1 // length is the bytes the sender may send more
	typePing   uint8 = 2 // length is an opaque value echoed back
	typeGoAway uint8 = 3 // length is a reason code; no new streams
)

// Flags, on data and window frames.
const (
	flagSYN uint16 = 1 << 0 // opens the stream
	flagACK uint16 = 1 << 1 // acknowledges the open
	flagFIN uint16 = 1 << 2 // the sender will write no more (half-close)
	flagRST uint16 = 1 << 3 // the stream is over, both ways, at once
	// flagWaiting, on a window frame of length 0, says the sender has data
	// for the stream and no window left; the receiver may enlarge the
	// window. Tether's own: hashicorp/yamux ignores it.
	flagWaiting uint16 = 1 << 4
)

// initialWindow is every stream's window before either side enlarges it: the
// spec fixes it, since the first data may arrive before any window frame.
const initialWindow = 256 << 10

// header is one frame's header.
type header struct {
	typ    uint8
	flags  uint16
	stream uint32
	length uint32
}

func (h header) encode(b *[headerSize]byte) {
	b[0] = protoVersion
	b[1] = h.typ
	binary.BigEndian.PutUint16(b[2:4], h.flags)
	binary.BigEndian.PutUint32(b[4:8], h.stream)
	binary.BigEndian.PutUint32(b[8:12], h.length)
}

// decodeHeader parses a header the peer sent.
func decodeHeader(b *[headerSize]byte) (header, error) {
	if b[0] != protoVersion {
		return header{}, fmt.Errorf("%w: version %d, want %d", errProtocol, b[0], protoVersion)
	}
	h := header{
		typ:    b[1],
		flags:  binary.BigEndian.Uint16(b[2:4]),
		stream: binary.BigEndian.Uint32(b[4:8]),
		length: binary.BigEndian.Uint32(b[8:12]),
	}
	if h.typ > typeGoAway {
		return header{}, fmt.Errorf("%w: frame type %d", errProtocol, h.typ)
	}
	return h, nil
}

func (h header) String() string {
	return fmt.Sprintf("type %d flags %#x stream %d length %d", h.typ, h.flags, h.stream, h.length)
}
