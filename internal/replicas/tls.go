package replicas

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
)

// The peer link's TLS trusts no chain: a peer is the replica whose certificate is, byte for
// byte, the one its signed, live Lease publishes. Go checks the peer holds the certificate's
// key; VerifyConnection, which also runs on resumed sessions, checks the certificate.

var errNotMember = errors.New("the certificate is not a live hub replica's")

// ServerTLS is the peer listener's configuration: it presents this replica's certificate and
// takes a connection only from a live, verified member presenting the one its Lease publishes.
func (r *Replicas) ServerTLS() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{r.self.cert},
		ClientAuth:   tls.RequireAnyClientCert,
		// A ticket would let a replica that has left resume a session; VerifyConnection
		// refuses it anyway, but there is nothing to save on a few long-lived connections.
		SessionTicketsDisabled: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("peer link: no client certificate")
			}
			if !r.isMember(cs.PeerCertificates[0].Raw) {
				return fmt.Errorf("peer link: client %w", errNotMember)
			}
			return nil
		},
	}
}

// ClientTLS is the configuration to dial the replica called member: it presents this
// replica's certificate and takes the server only if its certificate is, at the handshake,
// the one member's live Lease publishes.
func (r *Replicas) ClientTLS(member string) *tls.Config {
	own := r.self.cert
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		ServerName: LeasePrefix + member,
		// The chain and name checks are replaced, not skipped: VerifyConnection compares the
		// certificate with the member's published one.
		InsecureSkipVerify: true,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return &own, nil
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("peer link: no server certificate")
			}
			m, ok := r.Member(member)
			if !ok {
				return fmt.Errorf("peer link: %q is not a live hub replica", member)
			}
			if !bytes.Equal(cs.PeerCertificates[0].Raw, m.Cert) {
				return fmt.Errorf("peer link: server for %q: %w", member, errNotMember)
			}
			return nil
		},
	}
}

func (r *Replicas) isMember(der []byte) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.members {
		if bytes.Equal(m.Cert, der) {
			return true
		}
	}
	return false
}
