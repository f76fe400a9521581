package peers

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
)

// RoundTripReplica sends r, a query of the web side (web.Replicas), to the
// peer port of replica name, over the link's mutual TLS.
func (p *Peers) RoundTripReplica(name string, r *http.Request) (*http.Response, error) {
	p.mu.Lock()
	l := p.links[name]
	p.mu.Unlock()
	if l == nil {
		return nil, fmt.Errorf("no link to the hub replica %q", name)
	}
	out := r.Clone(r.Context())
	out.URL = &url.URL{Scheme: "https", Host: l.addr, Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery}
	out.Host = l.addr
	resp, err := l.transport.RoundTrip(out)
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// ReplicaNames are the replicas this one has a link to (web.Replicas), in
// order.
func (p *Peers) ReplicaNames() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	names := make([]string, 0, len(p.links))
	for name := range p.links {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}
