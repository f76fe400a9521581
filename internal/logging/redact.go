package logging

import (
	"net/url"
	"strings"
)

// RedactURL is raw, a URL from a setting, fit to quote in an error or a
// log line: its password, if it has one, is xxxxx. A URL that parses with
// a user loses only the password (net/url's Redacted); any other loses all
// that comes before an @ in what would be its host part, whether or not it
// parses.
func RedactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		return u.Redacted()
	}
	first := strings.Index(raw, "@")
	if first < 0 {
		return raw
	}
	start := 0
	if i := strings.LastIndex(raw[:first], "://"); i >= 0 {
		start = i + len("://")
	}
	host := raw[start:]
	if end := strings.IndexAny(host, "/?#"); end >= 0 {
		host = host[:end]
	}
	if at := strings.LastIndex(host, "@"); at >= 0 {
		return raw[:start] + "xxxxx" + raw[start+at:]
	}
	return raw
}
