package logging

import (
	"net/url"
	"strings"
)

// RedactURL is raw, a URL from a setting, fit to quote in an error or a
// log line: its password, if it has one, is xxxxx. A URL that parses with
// a user, and has no other @, loses only the password (net/url's
// Redacted). Any other with an @ in it, parsed or not, loses all between
// its scheme and its last @: what stands there can't be told from a
// password by someone reading the error.
func RedactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.User != nil && strings.Count(raw, "@") == 1 {
		return u.Redacted()
	}
	last := strings.LastIndex(raw, "@")
	if last < 0 {
		return raw
	}
	prefix := ""
	if i := strings.Index(raw, "://"); i >= 0 && i < strings.Index(raw, "@") {
		prefix = raw[:i+len("://")]
	}
	return prefix + "xxxxx" + raw[last:]
}
