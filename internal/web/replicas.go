package web

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/hub"
)

// With several hub replicas (SPEC section 8), each keeps the inventory of
// the clusters whose agents it holds. A query about another replica's
// cluster is answered by that replica, as if the person had asked it: the
// replica that received it has authenticated the person and checked they
// may see the cluster; the holder takes the person it asserts, checks
// again, and answers from its store with its own access reviews as that
// person (decision 035).

// Replicas carries queries to the other hub replicas (internal/peers has
// it, over the peer port's mutual TLS).
type Replicas interface {
	// RoundTripReplica sends r, whose URL has only a path (one of
	// PeerPath's) and a query, to the peer port of replica name.
	RoundTripReplica(name string, r *http.Request) (*http.Response, error)
	// ReplicaNames are the other replicas, for what every one of them
	// holds (session recordings).
	ReplicaNames() []string
}

// PeerPath is where the peer port serves PeerHandler.
const PeerPath = "/peer/v1/web/"

// headerPerson asserts, from one replica to another, who asks: a
// peerPerson, as JSON in base64url. Only PeerHandler reads it, and it is
// served on the peer port alone, which takes no one but replicas. On the
// port people use it means nothing: the person comes from a context value
// that only PeerHandler sets.
const headerPerson = "Tether-Peer-Person"

// peerPerson is what a replica asserts of the person it authenticated:
// all that web's answers and access reviews use of them.
type peerPerson struct {
	Name   string   `json:"name"`
	Groups []string `json:"groups,omitempty"`
	Source string   `json:"source,omitempty"`
	// Bearer is the person's own token, for forwardToken clusters' access
	// reviews: set only when auth.Person has it (OIDC ID tokens).
	Bearer string `json:"bearer,omitempty"`
}

func encodePerson(p auth.Person) string {
	b, _ := json.Marshal(peerPerson{Name: p.Name, Groups: p.Groups, Source: p.Source, Bearer: p.Bearer})
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodePerson(s string) (auth.Person, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return auth.Person{}, fmt.Errorf("the asserted person is not base64url: %w", err)
	}
	var pp peerPerson
	if err := json.Unmarshal(b, &pp); err != nil {
		return auth.Person{}, fmt.Errorf("the asserted person is not JSON: %w", err)
	}
	if pp.Name == "" {
		return auth.Person{}, errors.New("the asserted person has no name")
	}
	return auth.Person{Name: pp.Name, Groups: pp.Groups, Source: pp.Source, Bearer: pp.Bearer}, nil
}

// peerPersonKey holds, in a request's context, the person another replica
// asserted. Only PeerHandler sets it.
type peerPersonKey struct{}

// assertedPerson returns the person another replica asserted for r, if r
// came through PeerHandler.
func assertedPerson(r *http.Request) (auth.Person, bool) {
	p, ok := r.Context().Value(peerPersonKey{}).(auth.Person)
	return p, ok
}

// PeerHandler serves other replicas' queries, under PeerPath: only on the
// peer port, whose TLS takes replicas alone. Each takes the person the
// asking replica asserts, and is answered here, never carried further.
func (wb *Web) PeerHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+PeerPath+"clusters/{cluster}", wb.ServeClusterJSON)
	mux.HandleFunc("GET "+PeerPath+"clusters/{cluster}/resources", wb.ServeResources)
	mux.HandleFunc("GET "+PeerPath+"clusters/{cluster}/gateways", wb.ServeGateways)
	mux.HandleFunc("GET "+PeerPath+"clusters/{cluster}/domains", wb.ServeDomains)
	mux.HandleFunc("GET "+PeerPath+"clusters/{cluster}/events", wb.ServeObjectEvents)
	mux.HandleFunc("POST "+PeerPath+"resources", wb.servePeerFleetResources)
	mux.HandleFunc("POST "+peerDeviceDecide, wb.servePeerDeviceDecide)
	mux.HandleFunc("GET "+PeerPath+"clusters/{cluster}/recordings", wb.ServeRecordings)
	mux.HandleFunc("GET "+PeerPath+"clusters/{cluster}/recordings/{id}", wb.ServeRecording)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == peerDeviceToken { // a poll: no one to assert yet
			wb.servePeerDeviceToken(w, r)
			return
		}
		p, err := decodePerson(r.Header.Get(headerPerson))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mux.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), peerPersonKey{}, p)))
	})
}

// holder names the replica that holds cluster name's agent, when another
// does and its queries go there; "" when this replica answers them.
func (wb *Web) holder(r *http.Request, name string) string {
	if up := wb.holderUpstream(r, name); up != nil {
		return up.Replica()
	}
	return ""
}

// holderUpstream is holder's way to the cluster, or nil.
func (wb *Web) holderUpstream(r *http.Request, name string) hub.Upstream {
	if wb.cfg.Replicas == nil {
		return nil
	}
	if _, ok := assertedPerson(r); ok {
		return nil // carried once, never again: no loops between replicas
	}
	up := wb.cfg.Clusters.Reach(name)
	if up == nil || up.Replica() == "" {
		return nil
	}
	return up
}

// forwarded sends a query about cluster name (what: "/resources", say, or
// "" for the cluster itself) to the replica holding its agent, if another
// does, and relays its answer; it reports whether it did. The person has
// been authenticated here, and may see the cluster.
func (wb *Web) forwarded(w http.ResponseWriter, r *http.Request, name string, p auth.Person, what string) bool {
	up := wb.holderUpstream(r, name)
	if up == nil {
		return false
	}
	replica := up.Replica()
	// The claim ends when the replica's claims stream does (it stopped,
	// or went silent for three pings), or its agent leaves it: the query
	// ends with it, rather than wait on a replica that won't answer.
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	stop := context.AfterFunc(up.Context(), func() { cancel(errClaimEnded) })
	defer stop()
	// As for its share of a fleet-wide answer: nothing for ReplicaTimeout
	// is no answer.
	slow := time.AfterFunc(wb.cfg.ReplicaTimeout, func() { cancel(fmt.Errorf("it gave nothing for %s", wb.cfg.ReplicaTimeout)) })
	path := PeerPath + "clusters/" + url.PathEscape(name) + what
	resp, err := wb.askReplica(ctx, replica, http.MethodGet, path, r.URL.RawQuery, p, nil)
	slow.Stop()
	if err != nil {
		if r.Context().Err() == nil {
			err = cause(ctx, err)
			wb.log.Warn("Can't carry a query to the hub replica that holds the cluster's agent", "cluster", name, "replica", replica, "err", err)
			w.Header().Set("Retry-After", "2")
			http.Error(w, fmt.Sprintf("Tether can't answer for cluster %q now: the hub replica %q, which holds its agent, didn't answer: %v", name, replica, err), http.StatusServiceUnavailable)
		}
		return true
	}
	defer resp.Body.Close()
	for _, k := range []string{"Content-Type", "Cache-Control", "Retry-After", "WWW-Authenticate", leftOutTrailer} {
		if v := resp.Header.Values(k); len(v) > 0 {
			w.Header()[k] = v
		}
	}
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
	return true
}

var errClaimEnded = errors.New("its agent left it, or it stopped answering")

// askReplica sends a query to replica as the person p.
func (wb *Web) askReplica(ctx context.Context, replica, method, path, query string, p auth.Person, body io.Reader) (*http.Response, error) {
	// RoundTripReplica puts in the replica's address.
	req, err := http.NewRequestWithContext(ctx, method, "https://replica"+path, body)
	if err != nil {
		return nil, err
	}
	req.URL.RawQuery = query
	req.Header.Set(headerPerson, encodePerson(p))
	req.Header.Set("Accept", "application/json")
	return wb.cfg.Replicas.RoundTripReplica(replica, req)
}
