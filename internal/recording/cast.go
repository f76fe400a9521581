package recording

import (
	"bufio"
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"
)

// Header is an asciicast v2 file's first line
// (https://docs.asciinema.org/manual/asciicast/v2/), with what Tether
// knows of the session under "tether": players ignore keys they don't
// know, and the hub lists recordings from it.
type Header struct {
	Version   int    `json:"version"`
	Width     int    `json:"width"`
	Height    int    `json:"height"`
	Timestamp int64  `json:"timestamp"`
	Title     string `json:"title,omitempty"`
	Tether    Meta   `json:"tether"`
}

// Meta is what a recording is of, as the audit line says it.
type Meta struct {
	ID        string    `json:"requestId"` // the request's id, on its audit line too
	Cluster   string    `json:"cluster"`
	Person    string    `json:"person"`
	Verb      string    `json:"verb"` // exec or attach
	Namespace string    `json:"namespace,omitempty"`
	Pod       string    `json:"pod,omitempty"`
	Container string    `json:"container,omitempty"`
	Command   []string  `json:"command,omitempty"`
	TTY       bool      `json:"tty"`
	Time      time.Time `json:"time"`
	// Size is the file's size, in listings; not in the file.
	Size int64 `json:"size,omitempty"`
}

// castWriter writes an asciicast v2 file: the header once the terminal's
// size is known (at its first event), then one event a line.
type castWriter struct {
	w       *bufio.Writer
	meta    Meta
	start   time.Time
	header  bool
	written int64
	line    []byte
	// pending holds the start of a character an output or input event
	// ended in, for the next event of the same kind: the file's strings
	// are UTF-8, and a frame may end mid-character.
	pending [2][]byte
	// held are the events before the header, up to maxHeld bytes: the
	// shell's prompt may come before kubectl's first resize, and the
	// header should say the terminal's size.
	held []byte
}

// maxHeld bounds the events held until the terminal's size is known.
const maxHeld = 64 << 10

// defaultSize is the terminal's size when no resize came before the
// first event: kubectl sends one first.
const defaultWidth, defaultHeight = 80, 24

// begin writes the header, then the events held until now.
func (c *castWriter) begin(width, height int) error {
	c.header = true
	h := Header{Version: 2, Width: width, Height: height, Timestamp: c.start.Unix(), Title: title(c.meta), Tether: c.meta}
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	if err := c.write(append(b, '\n')); err != nil {
		return err
	}
	held := c.held
	c.held = nil
	return c.write(held)
}

// finish writes the header, if no event has yet, and what is held.
func (c *castWriter) finish() error {
	if c.header {
		return nil
	}
	return c.begin(defaultWidth, defaultHeight)
}

func title(m Meta) string {
	t := m.Pod
	if m.Container != "" {
		t += "/" + m.Container
	}
	for _, a := range m.Command {
		t += " " + a
	}
	if len(t) > 200 {
		t = t[:200] + "…"
	}
	return t
}

// event writes an event of kind "o", "i" or "r" at time at.
func (c *castWriter) event(at time.Time, kind byte, data []byte) error {
	if !c.header && kind == 'r' {
		w, h, _ := parseSize(string(data))
		return c.begin(w, h)
	}
	if kind == 'o' || kind == 'i' {
		k := 0
		if kind == 'i' {
			k = 1
		}
		data = append(c.pending[k], data...)
		cut := incompleteTail(data)
		c.pending[k] = append([]byte(nil), data[len(data)-cut:]...)
		data = data[:len(data)-cut]
		if len(data) == 0 {
			return nil
		}
	}
	t := at.Sub(c.start).Seconds()
	if t < 0 {
		t = 0
	}
	b := append(c.line[:0], '[')
	b = strconv.AppendFloat(b, t, 'f', 6, 64)
	b = append(b, ',', '"', kind, '"', ',')
	s, _ := json.Marshal(string(data)) // invalid UTF-8 becomes U+FFFD
	b = append(b, s...)
	b = append(b, ']', '\n')
	c.line = b
	if !c.header {
		if len(c.held)+len(b) <= maxHeld {
			c.held = append(c.held, b...)
			return nil
		}
		if err := c.begin(defaultWidth, defaultHeight); err != nil {
			return err
		}
	}
	return c.write(b)
}

func (c *castWriter) write(b []byte) error {
	n, err := c.w.Write(b)
	c.written += int64(n)
	return err
}

// incompleteTail is how many bytes at b's end begin a character that
// isn't all there.
func incompleteTail(b []byte) int {
	for i := 1; i <= 3 && i <= len(b); i++ {
		c := b[len(b)-i]
		if c < 0x80 {
			return 0 // ASCII: complete
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return i
			}
			return 0
		}
	}
	return 0
}

func parseSize(s string) (w, h int, ok bool) {
	ws, hs, ok := cutByte(s, 'x')
	if !ok {
		return defaultWidth, defaultHeight, false
	}
	w, err1 := strconv.Atoi(ws)
	h, err2 := strconv.Atoi(hs)
	if err1 != nil || err2 != nil || w <= 0 || h <= 0 {
		return defaultWidth, defaultHeight, false
	}
	return w, h, true
}

func cutByte(s string, c byte) (string, string, bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}
