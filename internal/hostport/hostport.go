// Package hostport finds the host in a peer's address. It exists so that the
// hub's per-address limits (agents' refusals, device sign-ins) and the auth
// proxy's trusted prefixes all read an address the same way, IPv6 included,
// without one of them importing another for it.
package hostport

import "net"

// Host is the host of addr, a "host:port" as net/http sets
// Request.RemoteAddr, with an IPv6 address's brackets taken off. When addr
// has no port, Host returns all of addr and false: a caller that keys a
// limit on the host can use it as it is, one that trusts the host must not.
func Host(addr string) (string, bool) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr, false
	}
	return host, true
}
