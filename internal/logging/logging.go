// Package logging builds Tether's slog loggers. The text format puts the
// sentence first, as people read it in `kubectl logs`, and the structured
// keys after it; the json format is slog's own, for log pipelines.
package logging

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
)

// New returns a logger writing format ("text" or "json") to w.
func New(format string, w io.Writer, level slog.Leveler) (*slog.Logger, error) {
	switch format {
	case "", "text":
		return slog.New(NewTextHandler(w, level)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})), nil
	}
	return nil, fmt.Errorf("TETHER_LOG_FORMAT must be text or json, not %q", format)
}

// TextHandler writes one line per record: time, level, message, then
// key=value pairs, values quoted where they need it, and names (agent,
// user, cluster) always.
type TextHandler struct {
	level  slog.Leveler
	prefix string // group prefix for keys, with a trailing dot
	attrs  string // preformatted attrs from WithAttrs
	mu     *sync.Mutex
	w      io.Writer
}

// NewTextHandler returns a TextHandler writing to w.
func NewTextHandler(w io.Writer, level slog.Leveler) *TextHandler {
	if level == nil {
		level = slog.LevelInfo
	}
	return &TextHandler{level: level, mu: new(sync.Mutex), w: w}
}

// Enabled reports whether level is logged.
func (h *TextHandler) Enabled(_ context.Context, level slog.Level) bool {
	return level >= h.level.Level()
}

// Handle writes r.
func (h *TextHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	t := r.Time
	if t.IsZero() {
		t = time.Now()
	}
	b.WriteString(t.UTC().Format("2006-01-02T15:04:05.000Z"))
	b.WriteByte(' ')
	b.WriteString(fmt.Sprintf("%-5s", r.Level.String()))
	b.WriteByte(' ')
	b.WriteString(r.Message)
	b.WriteString(h.attrs)
	r.Attrs(func(a slog.Attr) bool {
		appendAttr(&b, h.prefix, a)
		return true
	})
	b.WriteByte('\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := io.WriteString(h.w, b.String())
	return err
}

// WithAttrs returns a handler that adds attrs to every record.
func (h *TextHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	var b strings.Builder
	for _, a := range attrs {
		appendAttr(&b, h.prefix, a)
	}
	h2 := *h
	h2.attrs += b.String()
	return &h2
}

// WithGroup returns a handler that prefixes later keys with name.
func (h *TextHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	h2 := *h
	h2.prefix += name + "."
	return &h2
}

func appendAttr(b *strings.Builder, prefix string, a slog.Attr) {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return
	}
	if a.Value.Kind() == slog.KindGroup {
		p := prefix
		if a.Key != "" {
			p += a.Key + "."
		}
		for _, g := range a.Value.Group() {
			appendAttr(b, p, g)
		}
		return
	}
	b.WriteByte(' ')
	b.WriteString(prefix)
	b.WriteString(a.Key)
	b.WriteByte('=')
	var s string
	switch a.Value.Kind() {
	case slog.KindTime:
		s = a.Value.Time().UTC().Format(time.RFC3339Nano)
	default:
		s = a.Value.String()
	}
	if needsQuote(s) || a.Value.Kind() == slog.KindString && isName(a.Key) {
		s = strconv.Quote(s)
	}
	b.WriteString(s)
}

// isName reports whether key's values are names from outside: SPEC section
// 0 has them quoted in every line, so that a name reads the same in a
// sentence and after its key, and two names that differ only in what they
// look like can be told apart.
func isName(key string) bool { return key == "agent" || key == "user" || key == "cluster" }

func needsQuote(s string) bool {
	if s == "" {
		return true
	}
	for _, r := range s {
		if unicode.IsSpace(r) || r == '"' || r == '=' || !unicode.IsPrint(r) {
			return true
		}
	}
	return false
}
