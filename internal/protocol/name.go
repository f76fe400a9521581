package protocol

import "fmt"

// NameRule is how errors explain a DNS label.
const NameRule = `lower-case letters, digits and "-", starting and ending with a letter or digit ([a-z0-9]([-a-z0-9]*[a-z0-9])?), at most 63 characters`

// CheckName reports whether name is a DNS label, as cluster names must be: they appear in URLs
// and kubeconfig contexts. It lives here, with AgentHeader, because the name is what the agent
// sends and the hub looks up: the agent checks its own with it at start, and the agents list
// (internal/fleet) every entry's.
func CheckName(name string) error {
	if !validName(name) {
		return fmt.Errorf("%q is not a DNS label: %s", name, NameRule)
	}
	return nil
}

func validName(name string) bool {
	if len(name) == 0 || len(name) > 63 || name[0] == '-' || name[len(name)-1] == '-' {
		return false
	}
	for _, c := range []byte(name) {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
