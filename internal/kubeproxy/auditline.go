package kubeproxy

import (
	"math"
	"strconv"
	"time"
	"unicode/utf8"
)

// appendJSON appends rec as one JSON object, byte for byte what
// json.Marshal writes for it (FuzzAuditLine holds the two equal), but for
// nil Groups, which it writes as [] rather than null: SPEC has groups on
// every line, a list.
//
// Written out because the audit line is on every request: json.Marshal's
// reflection and allocations cost the hub 18 µs of its 480 µs of CPU per
// small GET in the bench's profile. In a loop (BenchmarkAuditLine) this
// takes a sixth of json.Marshal's time, and allocates nothing
// (docs/decisions/018-the-hubs-cpu-per-request.md).
func (rec *AuditRecord) appendJSON(b []byte) []byte {
	b = append(b, `{"time":"`...)
	b = rec.Time.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","person":`...)
	b = appendJSONString(b, rec.Person)
	b = appendJSONStrings(append(b, `,"groups":`...), rec.Groups)
	if rec.Source != "" {
		b = append(b, `,"source":`...)
		b = appendJSONString(b, rec.Source)
	}
	b = append(b, `,"cluster":`...)
	b = appendJSONString(b, rec.Cluster)
	b = append(b, `,"verb":`...)
	b = appendJSONString(b, rec.Verb)
	b = append(b, `,"method":`...)
	b = appendJSONString(b, rec.Method)
	b = append(b, `,"path":`...)
	b = appendJSONString(b, rec.Path)
	if rec.Pod != "" {
		b = append(b, `,"pod":`...)
		b = appendJSONString(b, rec.Pod)
	}
	if rec.Container != "" {
		b = append(b, `,"container":`...)
		b = appendJSONString(b, rec.Container)
	}
	if len(rec.Command) > 0 {
		b = appendJSONStrings(append(b, `,"command":`...), rec.Command)
	}
	if rec.TTY != nil {
		b = strconv.AppendBool(append(b, `,"tty":`...), *rec.TTY)
	}
	if rec.Stdin != nil {
		b = strconv.AppendBool(append(b, `,"stdin":`...), *rec.Stdin)
	}
	if len(rec.Ports) > 0 {
		b = appendJSONStrings(append(b, `,"ports":`...), rec.Ports)
	}
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(rec.Status), 10)
	b = append(b, `,"duration":`...)
	b = appendJSONFloat(b, rec.Duration)
	b = append(b, `,"bytes":`...)
	b = strconv.AppendInt(b, rec.Bytes, 10)
	b = append(b, `,"requestId":`...)
	b = appendJSONString(b, rec.RequestID)
	b = append(b, `,"remote":`...)
	b = appendJSONString(b, rec.Remote)
	if rec.Location != "" {
		b = append(b, `,"location":`...)
		b = appendJSONString(b, rec.Location)
	}
	if rec.Ended != "" {
		b = append(b, `,"ended":`...)
		b = appendJSONString(b, rec.Ended)
	}
	if rec.Replica != "" {
		b = append(b, `,"replica":`...)
		b = appendJSONString(b, rec.Replica)
	}
	if rec.Recording != "" {
		b = append(b, `,"recording":`...)
		b = appendJSONString(b, rec.Recording)
	}
	if rec.RecordingStopped != "" {
		b = append(b, `,"recordingStopped":`...)
		b = appendJSONString(b, rec.RecordingStopped)
	}
	return append(b, '}')
}

// appendJSONStrings appends list as a JSON array, [] when nil.
func appendJSONStrings(b []byte, list []string) []byte {
	b = append(b, '[')
	for i, s := range list {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, s)
	}
	return append(b, ']')
}

// appendJSONString appends s quoted as encoding/json quotes it: control
// characters, quotes and backslashes escaped, and also <, > and & (its HTML
// escaping), U+2028 and U+2029; each byte of invalid UTF-8 becomes U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= ' ' && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, `\b`...)
			case '\f':
				b = append(b, `\f`...)
			case '\n':
				b = append(b, `\n`...)
			case '\r':
				b = append(b, `\r`...)
			case '\t':
				b = append(b, `\t`...)
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// appendJSONFloat appends f as encoding/json writes a float64: the
// shortest decimal that reads back as f, in exponent form only below 1e-6
// or from 1e21 up, with the exponent unpadded. f must be finite.
func appendJSONFloat(b []byte, f float64) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if n := len(b); format == 'e' && n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
		b[n-2] = b[n-1] // e-07 is e-7
		b = b[:n-1]
	}
	return b
}
