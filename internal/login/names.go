// Package login is the person's side of Tether on the command line
// (SPEC section 10): `tether login` writes kubectl contexts for a hub's
// clusters, `tether credential` is the kubectl exec credential plugin those
// contexts run, and `tether logout` forgets what it cached.
package login

import (
	"net/url"
	"strings"
)

// Prefix names a hub in kubeconfigs: its host (with a port other than the
// scheme's) and base path, like "tether.example.com" or
// "hub.internal:8443/k8s". Two hubs' clusters named prod become
// "tether.example.com/prod" and "other.example.org/prod", so a merged
// kubeconfig never mixes them up. A URL without a host gives "tether".
func Prefix(hubURL string) string {
	u, err := url.Parse(hubURL)
	if err != nil || u.Host == "" {
		return "tether"
	}
	host := strings.ToLower(u.Host)
	if p := u.Port(); (u.Scheme == "https" && p == "443") || (u.Scheme == "http" && p == "80") {
		host = strings.ToLower(u.Hostname())
		if strings.Contains(host, ":") {
			host = "[" + host + "]" // IPv6
		}
	}
	return host + strings.TrimSuffix(u.EscapedPath(), "/")
}

// Names are a hub's entries in a kubeconfig: one user for the hub, and a
// context and a cluster named "<prefix>/<cluster>" for each of its clusters.
type Names struct {
	Prefix string
}

// User is the name of the hub's one user entry: the prefix itself, which
// holds no "/<cluster>" and so is no context's or cluster's name.
func (n Names) User() string { return n.Prefix }

// Context is the name of cluster's context, and of its cluster entry.
func (n Names) Context(cluster string) string { return n.Prefix + "/" + cluster }

// Owns says whether name is one of this hub's context or cluster names.
func (n Names) Owns(name string) bool {
	rest, ok := strings.CutPrefix(name, n.Prefix+"/")
	return ok && rest != "" && !strings.Contains(rest, "/")
}
