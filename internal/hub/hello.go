package hub

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/tetherhq/tether/internal/protocol"
)

// maxAgentVersion bounds the version an agent reports: it is kept for as
// long as the agent is connected, shown on the fleet page and written in
// log lines.
const maxAgentVersion = 128

// checkHello checks the hello's protocol version, which must be one this
// hub speaks, and the fields the hub keeps and shows: the agent's version
// must be short printable text, and the API server's address a
// host and port. (The CA is checked by parsing it; the token is the API
// server's to judge.) An authenticated agent is still input from outside.
func checkHello(m protocol.Message) error {
	if m.Protocol > protocol.Version {
		// A newer agent whose messages this hub could misread.
		return fmt.Errorf("the hello speaks protocol %d, and this hub only %d and older: upgrade the hub", m.Protocol, protocol.Version)
	}
	v := m.AgentVersion
	if len(v) > maxAgentVersion || !utf8.ValidString(v) || strings.ContainsFunc(v, func(r rune) bool { return !unicode.IsPrint(r) }) {
		return fmt.Errorf("the hello's agentVersion must be printable text of at most %d bytes, not %q", maxAgentVersion, truncate(v, 64))
	}
	if !protocol.ValidAPIServer(m.APIServer) {
		return fmt.Errorf("the hello's apiServer must be host:port, not %q", truncate(m.APIServer, 64))
	}
	return nil
}

// truncate shortens s to at most n bytes for an error message.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
