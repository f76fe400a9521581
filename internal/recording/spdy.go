package recording

import (
	"bytes"
	"fmt"

	"github.com/moby/spdystream/spdy"
)

// spdyStreams is what both directions of a SPDY/3.1 session know of its
// streams: the client names each stream's type (stdin, stdout, stderr,
// error, resize) in the SYN_STREAM it sends, and the server's data for
// stdout comes on that stream the other way.
type spdyStreams struct {
	types map[spdy.StreamId]int // channel by stream
}

// maxSPDYStreams bounds the streams a recording remembers: an exec opens
// five.
const maxSPDYStreams = 64

// spdyParser reads one direction of a SPDY/3.1 session (kubectl's older
// exec and attach, and clients that still use it) with spdystream's
// Framer, which Kubernetes itself uses. It splits the stream into whole
// frames first, so the Framer, which reads as a connection's owner does,
// never waits for bytes that haven't come; each direction has its own
// Framer, as each has its own header compression.
type spdyParser struct {
	streams *spdyStreams
	framer  *spdy.Framer
	in      bytes.Reader // the whole frame the Framer reads next
	buf     []byte
}

func newSPDYParser(streams *spdyStreams) (*spdyParser, error) {
	p := &spdyParser{streams: streams}
	f, err := spdy.NewFramerWithOptions(nil, &p.in,
		spdy.WithMaxControlFramePayloadSize(64<<10),
		spdy.WithMaxHeaderCount(64),
		spdy.WithMaxHeaderFieldSize(8<<10))
	if err != nil {
		return nil, err
	}
	p.framer = f
	return p, nil
}

// feed parses what b completes, calling emit with each data frame's
// channel and payload. b is not kept.
func (p *spdyParser) feed(b []byte, emit func(channel int, data []byte)) error {
	p.buf = append(p.buf, b...)
	for len(p.buf) >= 8 {
		n := int(p.buf[5])<<16 | int(p.buf[6])<<8 | int(p.buf[7])
		if n > maxFrame {
			return fmt.Errorf("spdy: %d bytes: %w", n, ErrFrameTooLarge)
		}
		if len(p.buf) < 8+n {
			break
		}
		p.in.Reset(p.buf[:8+n])
		f, err := p.framer.ReadFrame()
		if err != nil {
			return fmt.Errorf("spdy: %w", err)
		}
		if p.in.Len() != 0 {
			return fmt.Errorf("spdy: a frame of %d bytes read as %d", 8+n, 8+n-p.in.Len())
		}
		p.buf = p.buf[8+n:]
		switch f := f.(type) {
		case *spdy.SynStreamFrame:
			ch, ok := spdyChannels[f.Headers.Get("streamtype")]
			if ok && len(p.streams.types) < maxSPDYStreams {
				if p.streams.types == nil {
					p.streams.types = map[spdy.StreamId]int{}
				}
				p.streams.types[f.StreamId] = ch
			}
		case *spdy.DataFrame:
			if ch, ok := p.streams.types[f.StreamId]; ok && len(f.Data) > 0 {
				emit(ch, f.Data)
			}
		}
	}
	if len(p.buf) == 0 {
		p.buf = nil
	}
	return nil
}

// spdyChannels are the stream types of Kubernetes' remote command
// protocol, as the channels of its WebSocket one.
var spdyChannels = map[string]int{
	"stdin": chanStdin, "stdout": chanStdout, "stderr": chanStderr, "error": chanError, "resize": chanResize,
}

// The channels of Kubernetes' remote command protocol (k8s.io/apimachinery
// remotecommand; 255 closes a channel in v5).
const (
	chanStdin  = 0
	chanStdout = 1
	chanStderr = 2
	chanError  = 3
	chanResize = 4
)
