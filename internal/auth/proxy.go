package auth

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"

	"github.com/tetherhq/tether/internal/hostport"
)

// proxyConfig is an authenticating proxy in front of the hub: it signs people in and says who
// they are in headers, which count only on connections from its own addresses.
type proxyConfig struct {
	userHeader, groupsHeader string // canonical; groupsHeader may be ""
	trusted                  []netip.Prefix
}

func newProxyConfig(c Config) *proxyConfig {
	p := &proxyConfig{userHeader: http.CanonicalHeaderKey(c.ProxyUserHeader), trusted: c.ProxyTrusted}
	if c.ProxyGroupsHeader != "" {
		p.groupsHeader = http.CanonicalHeaderKey(c.ProxyGroupsHeader)
	}
	return p
}

func (p *proxyConfig) headers() []string {
	if p.groupsHeader == "" {
		return []string{p.userHeader}
	}
	return []string{p.userHeader, p.groupsHeader}
}

// fromProxy reads the auth proxy's headers. They count only when the TCP peer (r.RemoteAddr)
// is in TETHER_AUTH_PROXY_TRUSTED_CIDRS: X-Forwarded-For and the like are the client's word,
// and anyone could write them. From another peer the headers are ignored, not an error: the
// request simply has no credentials, and the hub strips the headers before forwarding.
//
// Groups come comma-separated, in one header or several; spaces around each are dropped, so a
// group can't contain a comma.
func (a *Authenticator) fromProxy(r *http.Request) (Person, bool, error) {
	p := a.proxy
	if p == nil {
		return Person{}, false, nil
	}
	names := r.Header.Values(p.userHeader)
	if len(names) == 0 || !p.trusts(r.RemoteAddr) {
		return Person{}, false, nil
	}
	if len(names) > 1 {
		return Person{}, false, fmt.Errorf("%w: the auth proxy sent %d %s headers; it must send one", ErrMalformed, len(names), p.userHeader)
	}
	if names[0] == "" {
		return Person{}, false, nil
	}
	person := Person{Name: names[0], Source: SourceProxy}
	if p.groupsHeader != "" {
		for _, v := range r.Header.Values(p.groupsHeader) {
			for _, g := range strings.Split(v, ",") {
				if g = strings.TrimSpace(g); g != "" {
					person.Groups = append(person.Groups, g)
				}
			}
		}
	}
	return person, true, nil
}

// trusts reports whether the peer at remoteAddr ("host:port", as net/http sets
// Request.RemoteAddr) is in a trusted prefix. IPv4 peers on an IPv6 socket (::ffff:10.1.2.3)
// count as their IPv4 address; zones are ignored.
func (p *proxyConfig) trusts(remoteAddr string) bool {
	host, ok := hostport.Host(remoteAddr)
	if !ok {
		return false
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	addr = addr.WithZone("").Unmap()
	for _, pfx := range p.trusted {
		if pfx.Contains(addr) {
			return true
		}
	}
	return false
}
