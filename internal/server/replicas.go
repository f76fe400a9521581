package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/peers"
	"github.com/tetherhq/tether/internal/replicas"
	"github.com/tetherhq/tether/internal/web"
)

// replicaSet is what a replica under TETHER_COORDINATION=kubernetes runs
// beside the hub (SPEC section 8): its Lease among the others', and the
// peer port where they reach it. The peer link itself is the Hub's
// (Config.Members).
type replicaSet struct {
	members *replicas.Replicas
	ln      net.Listener
	srv     *http.Server
}

// joinReplicas listens on the peer port and takes this replica's Lease.
// It returns once the replica knows the others.
func joinReplicas(ctx context.Context, o Options, log *slog.Logger) (*replicaSet, error) {
	keys, err := auth.ReadSigningKeys(o.Auth.SigningKeyFile)
	if err != nil {
		return nil, err
	}
	client, err := replicas.ClientFromEnv(o.Replica.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("TETHER_COORDINATION=kubernetes: %w", err)
	}
	ln, err := net.Listen("tcp", o.Replica.PeerListenAddr)
	if err != nil {
		return nil, fmt.Errorf("TETHER_PEER_LISTEN_ADDR %q can't be listened on: %w", o.Replica.PeerListenAddr, err)
	}
	members, err := replicas.Join(ctx, replicas.Config{Logger: log, Client: client, Namespace: o.Replica.Namespace,
		Name: o.Replica.Name, PeerAddr: o.Replica.PeerAddr, SigningKeys: keys})
	if err != nil {
		ln.Close()
		return nil, err
	}
	log.Info("Joined the hub's replicas", "replica", o.Replica.Name, "namespace", o.Replica.Namespace,
		"peerAddr", o.Replica.PeerAddr, "others", len(members.Members()))
	return &replicaSet{members: members, ln: ln}, nil
}

// server makes the peer port's server for h.
func (rs *replicaSet) server(h *Hub) {
	mux := http.NewServeMux()
	if h.web != nil {
		mux.Handle(web.PeerPath, h.web.PeerHandler())
	}
	mux.Handle("/", h.peers.Handler())
	rs.srv = h.peers.Server(mux)
}

// serve serves h's peer link on the peer port until close: the claims
// and carried requests (internal/peers) and the inventory queries
// (internal/web), which only replicas may ask.
func (rs *replicaSet) serve(serveErr chan<- error) {
	if err := rs.srv.ServeTLS(rs.ln, "", ""); !errors.Is(err, http.ErrServerClosed) {
		serveErr <- fmt.Errorf("the peer port: %w", err)
	}
}

// close closes the peer port and gives this replica's Lease up, so the
// others drop it at once. Run it after h.Close, which ends the peer link
// and with it the claims streams served, which Shutdown would wait for.
func (rs *replicaSet) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	rs.srv.Shutdown(ctx)
	cancel()
	rs.srv.Close()
	rs.members.Close()
}

// membership is the replicas' Leases as the peer link sees them.
type membership struct{ r *replicas.Replicas }

func (m membership) Self() string                      { return m.r.Self().Name }
func (m membership) Changed() <-chan struct{}          { return m.r.Changed() }
func (m membership) ServerTLS() *tls.Config            { return m.r.ServerTLS() }
func (m membership) ClientTLS(name string) *tls.Config { return m.r.ClientTLS(name) }
func (m membership) Peers() []peers.Peer {
	var out []peers.Peer
	for _, mem := range m.r.Members() {
		out = append(out, peers.Peer{Name: mem.Name, Addr: mem.PeerAddr})
	}
	return out
}
