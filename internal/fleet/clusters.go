package fleet

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/tetherhq/tether/internal/listfile"
	"github.com/tetherhq/tether/internal/protocol"
)

// SettingClusters is the setting of the clusters the hub reaches directly, without an agent in
// them (SPEC section 2).
const SettingClusters = "TETHER_FLEET_CLUSTERS"

var clusterFields = []string{"name", "server", "caFile", "tokenFile", "labels", "groups", "forwardToken"}

// Cluster is one entry of TETHER_FLEET_CLUSTERS: a cluster whose API server the hub can reach
// itself. The hub shows and proxies it exactly like an agent's cluster.
//
//   - name: staging             # unique across this list and the agents list; a DNS label
//     server: https://10.0.0.5:6443
//     caFile: /etc/tether/staging/ca.crt       # the CA the API server's certificate chains to
//     tokenFile: /etc/tether/staging/token     # read again as it changes, like a pod's token
//     labels: {env: staging}
//     groups: [platform]        # as in the agents list
//     forwardToken: false
type Cluster struct {
	Name string
	// Server is the API server's address, host:port; ServerName is the host its certificate must
	// name.
	Server, ServerName string
	// CAFile and TokenFile are paths, read when used: the token must be one the API server lets
	// impersonate people, as an agent's service account token is.
	CAFile, TokenFile string
	Labels            map[string]string
	Groups            Groups
	ForwardToken      bool
}

// ParseClusters reads TETHER_FLEET_CLUSTERS: YAML, or that YAML base64-encoded, as the agents list.
func ParseClusters(data []byte) ([]Cluster, error) {
	spec := listfile.ListSpec{Setting: SettingClusters, Fields: clusterFields, Example: "staging"}
	list := []Cluster{}
	err := listfile.ParseList(spec, data, func(e *listfile.Entry) error {
		c := Cluster{Name: e.Name()}
		if protocol.CheckName(c.Name) != nil {
			return e.Errorf("needs a name that is a DNS label: %s.", protocol.NameRule)
		}
		server, _, err := e.String("server")
		if err != nil {
			return err
		}
		if c.Server, c.ServerName, err = parseServer(server); err != nil {
			return e.Errorf("needs a server like https://10.0.0.5:6443: %v.", err)
		}
		for _, f := range []struct {
			field string
			to    *string
		}{{"caFile", &c.CAFile}, {"tokenFile", &c.TokenFile}} {
			v, _, err := e.String(f.field)
			if err != nil {
				return err
			}
			if strings.TrimSpace(v) == "" {
				return e.Errorf("needs %s, the path of a file.", f.field)
			}
			*f.to = v
		}
		if c.Labels, c.Groups, c.ForwardToken, err = shown(e); err != nil {
			return err
		}
		list = append(list, c)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return list, nil
}

// parseServer checks an API server's URL: https, a host, an optional port (443 when absent), and
// nothing else.
func parseServer(s string) (addr, host string, err error) {
	if s == "" {
		return "", "", fmt.Errorf("it has none")
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", "", fmt.Errorf("%q is not a URL", s)
	}
	switch {
	case u.Scheme != "https":
		return "", "", fmt.Errorf("%q is not an https:// URL", s)
	case u.Hostname() == "" || u.Opaque != "":
		return "", "", fmt.Errorf("%q has no host", s)
	case u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return "", "", fmt.Errorf("%q has more than a scheme, host and port", s)
	}
	if !validHost(u.Hostname()) {
		return "", "", fmt.Errorf("%q has a host that is neither a DNS name nor an IP address", s)
	}
	port := u.Port()
	if port == "" {
		if strings.HasSuffix(u.Host, ":") {
			return "", "", fmt.Errorf("%q has an empty port", s)
		}
		port = "443"
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || strings.ContainsAny(port, "+-") {
		return "", "", fmt.Errorf("%q has a bad port", s)
	}
	return net.JoinHostPort(u.Hostname(), port), u.Hostname(), nil
}

// validHost reports whether h, a URL's host without brackets or port, is an
// IP address or looks like a DNS name: letters, digits, '-', '_' and dots.
func validHost(h string) bool {
	if net.ParseIP(h) != nil {
		return true
	}
	if h == "" || strings.HasPrefix(h, ".") || strings.HasPrefix(h, "-") {
		return false
	}
	for _, r := range h {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

// DirectEntry is the agents-list entry of a cluster the hub reaches itself, for the hub's own
// agent to connect with tokenHash.
func (c Cluster) DirectEntry(tokenHash listfile.Hash) Agent {
	return Agent{Name: c.Name, TokenHashes: []listfile.Hash{tokenHash}, Labels: c.Labels, Groups: c.Groups, ForwardToken: c.ForwardToken}
}
