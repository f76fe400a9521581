package hub

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"time"
)

// How the hub reaches a cluster's API server through its tunnel: the name
// it checks and sends, its TLS and CA, and the agent's credentials.

// APIServerName is the name the hub checks the API server's certificate
// against, and sends as the Host of its requests: the one every in-cluster
// client uses. A cluster the hub reaches itself has its own (DirectServer).
const APIServerName = "kubernetes.default.svc"

// DirectServer is the API server of a cluster the hub reaches itself, by
// the address its server URL names, as kubectl pointed at that URL would:
// one outside the cluster need not have the name kubernetes.default.svc in
// its certificate, and a proxy in front of it may route by Host.
type DirectServer struct {
	Host       string // host:port, as the Host of every request
	ServerName string // the host its certificate must name
}

// apiHost is the Host of the hub's requests to c's API server.
func (c *agentConn) apiHost() string {
	if d, ok := c.hub.cfg.Direct[c.name]; ok {
		return d.Host
	}
	return APIServerName
}

// apiTLSConfig is the TLS the hub speaks to the cluster's API server: checked
// against the CA the agent sent, as kubernetes.default.svc (or the host of a
// cluster the hub reaches itself), HTTP/1.1.
//
// The certificate is checked in VerifyConnection, as crypto/tls checks it,
// with a root pool made for the handshake and dropped after it. A pool in
// RootCAs would stay with every connection the hub keeps, parsed: 3 KiB
// per cluster whose API server answers (decision 019).
func (c *agentConn) apiTLSConfig() *tls.Config {
	serverName := APIServerName
	if d, ok := c.hub.cfg.Direct[c.name]; ok {
		serverName = d.ServerName
	}
	return APIServerTLS(c.ca, serverName)
}

// APIServerTLS is the TLS to speak to an API server whose certificate must
// chain to one in ca (DER) and name serverName, HTTP/1.1: the hub's to its
// agents' clusters, and another replica's through this one's agent
// (internal/peers).
func APIServerTLS(ca [][]byte, serverName string) *tls.Config {
	return &tls.Config{
		ServerName: serverName,
		MinVersion: tls.VersionTLS12,
		// Not skipped: checked in VerifyConnection instead.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			return verifyServer(ca, serverName, cs.PeerCertificates)
		},
	}
}

// verifyServer checks a server's certificate chain as crypto/tls does for
// a client (Config.RootCAs = ca, Config.ServerName = serverName): the first
// certificate must chain to one in ca, through the others if need be, be
// valid now, for serverName, and for server authentication.
func verifyServer(ca [][]byte, serverName string, chain []*x509.Certificate) error {
	if len(chain) == 0 {
		return errors.New("tls: the server sent no certificate")
	}
	roots := x509.NewCertPool()
	for _, der := range ca {
		if cert, err := x509.ParseCertificate(der); err == nil { // parsed once already
			roots.AddCert(cert)
		}
	}
	opts := x509.VerifyOptions{Roots: roots, DNSName: serverName, Intermediates: x509.NewCertPool()}
	for _, cert := range chain[1:] {
		opts.Intermediates.AddCert(cert)
	}
	if _, err := chain[0].Verify(opts); err != nil {
		return &tls.CertificateVerificationError{UnverifiedCertificates: chain, Err: err}
	}
	return nil
}

// dialAPI opens a connection to the cluster's API server: a stream through
// the tunnel, with TLS inside it. The agent only ever sees ciphertext.
func (c *agentConn) dialAPI(ctx context.Context, tlsConfig *tls.Config) (*tls.Conn, error) {
	if IsOwnRequest(ctx) {
		// Counted from before its turn: a dial waiting for one has no
		// stream open yet, and must keep the transport it will bring a
		// connection to (hubTransportDone).
		c.ownDials.Add(1)
		defer c.ownDials.Add(-1)
		done, err := c.hub.takeTurn(ctx, c.sess.Done())
		if err != nil {
			return nil, err
		}
		defer done()
	}
	st, err := c.dial(ctx)
	if err != nil {
		return nil, err
	}
	return HandshakeAPI(ctx, st, tlsConfig)
}

// HandshakeAPI speaks TLS to an API server over st, a stream that reaches
// it, and closes st if the handshake fails.
func HandshakeAPI(ctx context.Context, st net.Conn, tlsConfig *tls.Config) (*tls.Conn, error) {
	tc := tls.Client(st, tlsConfig)
	// net/http's transport dials with a context the request's end doesn't
	// cancel, and no deadline: the handshake has its own, as the
	// transport's TLSHandshakeTimeout would give it.
	hctx, cancel := context.WithTimeout(ctx, apiTLSHandshakeTimeout)
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		st.Close()
		return nil, fmt.Errorf("TLS with the API server: %w", err)
	}
	return tc, nil
}

// apiTLSHandshakeTimeout bounds a TLS handshake with an API server, as
// net/http's DefaultTransport bounds its own.
const apiTLSHandshakeTimeout = 10 * time.Second

// parseCA returns the DER of the certificates in data's PEM blocks that
// parse, skipping others, as x509.CertPool.AppendCertsFromPEM does.
func parseCA(data []byte) [][]byte {
	var certs [][]byte
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return certs
		}
		if b.Type != "CERTIFICATE" || len(b.Headers) != 0 {
			continue
		}
		if _, err := x509.ParseCertificate(b.Bytes); err == nil {
			certs = append(certs, b.Bytes)
		}
	}
}

// serviceAccountAuth returns the Authorization value that carries the
// agent's service account token.
func (c *agentConn) serviceAccountAuth() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.saAuth
}

// authorization returns the Authorization value that carries a bearer token.
func authorization(token string) string { return "Bearer " + token }
