package store

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
)

// ErrNoGateway is returned when no gateway serves a host.
var ErrNoGateway = errors.New("no gateway serves this host")

// ErrHiddenGateway is returned when the gateways that serve a host are all
// in namespaces the person may not list: the answer is theirs to know only
// if they could list it.
var ErrHiddenGateway = errors.New("no gateway you may list serves this host")

// AmbiguousError is returned when several gateways serve a host and no
// tie-breaker picks one of them.
type AmbiguousError struct {
	Host       string
	Candidates []string // namespace/name, sorted: those the person may list
	Hidden     int      // how many more, in namespaces they may not list
	TieBreaker string   // set when it names none of the candidates, to those who may list it
}

func (e *AmbiguousError) Error() string {
	msg := fmt.Sprintf("%d gateways serve %q: %s", len(e.Candidates)+e.Hidden, e.Host, strings.Join(e.Candidates, ", "))
	if e.Hidden > 0 {
		msg += fmt.Sprintf(" and %d you may not list", e.Hidden)
	}
	if e.TieBreaker != "" {
		return msg + fmt.Sprintf("; the tie-breaker %s is none of them", e.TieBreaker)
	}
	return msg + "; set the agent's TETHER_ISTIO_GATEWAY_TIE_BREAKER to the one that should win"
}

// Gateway names the Istio Gateway ("namespace/name") of cluster that serves
// host. An exact host and a wildcard count alike; when several match, the
// agent's tie-breaker decides. The answer is decided over every gateway,
// then shown only if allow lets the person see it: a gateway they may not
// list still serves the host, and one they may list that loses to it
// doesn't. The candidates returned are those they may list.
func (s *Store) Gateway(cluster, host string, allow Allow) (string, []string, error) {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	s.mu.RLock()
	st := s.clusters[cluster]
	var candidates []string
	var tieBreaker string
	if st != nil {
		tieBreaker = st.tieBreaker
		candidates = st.gatewaysOf(host)
	}
	s.mu.RUnlock()
	// Ask outside the lock: allow may ask the cluster.
	return decide(host, candidates, tieBreaker, allow)
}

// gatewaysOf lists the gateways ("namespace/name") with a host that serves
// host. The store's lock is held.
func (st *state) gatewaysOf(host string) []string {
	var candidates []string
	for _, gw := range st.objects["gateways"] {
		for _, h := range gw.Hosts {
			if hostMatches(h, host) {
				candidates = append(candidates, gw.Namespace+"/"+gw.Name)
				break
			}
		}
	}
	return candidates
}

// decide picks the gateway of candidates that serves host, as Gateway
// says.
func decide(host string, candidates []string, tieBreaker string, allow Allow) (string, []string, error) {
	// In order, so that the same are asked each time when allow can ask
	// about only so many.
	sort.Strings(candidates)
	var visible []string
	for _, c := range candidates {
		ns, _, _ := strings.Cut(c, "/")
		if allow("gateways", ns) {
			visible = append(visible, c)
		}
	}
	hidden := len(candidates) - len(visible)
	winner := ""
	switch {
	case len(candidates) == 0:
		return "", nil, ErrNoGateway
	case len(visible) == 0:
		return "", nil, ErrHiddenGateway
	case len(candidates) == 1:
		winner = candidates[0]
	case slices.Contains(candidates, tieBreaker):
		winner = tieBreaker
	}
	switch {
	case winner == "":
		if ns, _, _ := strings.Cut(tieBreaker, "/"); tieBreaker != "" && !allow("gateways", ns) {
			tieBreaker = "" // it names a gateway the person may not list
		}
		return "", visible, &AmbiguousError{Host: host, Candidates: visible, Hidden: hidden, TieBreaker: tieBreaker}
	case !slices.Contains(visible, winner):
		return "", nil, ErrHiddenGateway
	}
	return winner, visible, nil
}

// Domain is one host a cluster's Istio Gateways expose: the gateway that
// wins it, or the conflict no tie-breaker settles.
type Domain struct {
	Host    string `json:"host"`
	Gateway string `json:"gateway,omitempty"` // namespace/name
	// Candidates are the gateways, of those the person may list, that
	// serve the host when more than one does.
	Candidates []string `json:"candidates,omitempty"`
	// Conflict says why no gateway wins: several serve the host and the
	// tie-breaker names none of them.
	Conflict string `json:"conflict,omitempty"`
}

// Domains lists every host the Istio Gateways of cluster expose, sorted,
// each decided as Gateway decides it (a wildcard host is served by itself
// and by broader wildcards, "*.example.com" by "*"), and shown only when
// the person may list a gateway that serves it. allow is asked once per
// namespace.
func (s *Store) Domains(cluster string, allow Allow) []Domain {
	s.mu.RLock()
	st := s.clusters[cluster]
	if st == nil {
		s.mu.RUnlock()
		return nil
	}
	tieBreaker := st.tieBreaker
	hosts := map[string][]string{}
	for _, gw := range st.objects["gateways"] {
		for _, h := range gw.Hosts {
			h = strings.ToLower(strings.TrimSuffix(h, "."))
			if _, ok := hosts[h]; !ok {
				hosts[h] = st.gatewaysOf(h)
			}
		}
	}
	s.mu.RUnlock()
	asked := map[string]bool{}
	once := func(kind, ns string) bool {
		ok, known := asked[ns]
		if !known {
			ok = allow(kind, ns)
			asked[ns] = ok
		}
		return ok
	}
	var out []Domain
	for _, h := range slices.Sorted(maps.Keys(hosts)) {
		winner, candidates, err := decide(h, hosts[h], tieBreaker, once)
		var amb *AmbiguousError
		switch {
		case err == nil:
			d := Domain{Host: h, Gateway: winner}
			if len(candidates) > 1 {
				d.Candidates = candidates
			}
			out = append(out, d)
		case errors.As(err, &amb):
			out = append(out, Domain{Host: h, Candidates: amb.Candidates, Conflict: amb.Error()})
		}
	}
	return out
}

// hostMatches reports whether a Gateway's host pattern serves host: "*"
// serves every host, "*.example.com" every name below example.com.
func hostMatches(pattern, host string) bool {
	pattern = strings.ToLower(pattern)
	if pattern == "*" {
		return true
	}
	if suffix, ok := strings.CutPrefix(pattern, "*"); ok {
		return strings.HasSuffix(host, suffix) && len(host) > len(suffix)
	}
	return pattern == host
}
