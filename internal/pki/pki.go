// Package pki makes the small certificate authorities Tether needs where no
// one hands it certificates: the local API server of `tether dev`, and the
// hubs, API servers and impostors of its tests. Keys are ECDSA P-256: fast to
// make, and accepted by every client Tether meets.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"time"
)

// CA is a certificate authority that signs leaf certificates.
type CA struct {
	// CertPEM is the CA's certificate, for clients to trust.
	CertPEM []byte
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	ttl     time.Duration
}

// NewCA makes a CA named name whose certificates, its own included, are valid
// for ttl (and from an hour ago, for clocks a little behind).
func NewCA(name string, ttl time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(ttl),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("pki: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{CertPEM: encode("CERTIFICATE", der), cert: cert, key: key, ttl: ttl}, nil
}

// Pool returns a pool holding only this CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// Leaf describes a certificate to issue.
type Leaf struct {
	CommonName string
	// Organization names the subject's groups, as Kubernetes reads them
	// from client certificates.
	Organization []string
	// Hosts are DNS names and IP addresses the certificate is valid for, as
	// a server.
	Hosts []string
	// Client makes it a client certificate too.
	Client bool
}

// Issue signs a new certificate for l and returns it and its key, PEM.
func (ca *CA) Issue(l Leaf) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: l.CommonName, Organization: l.Organization},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(ca.ttl),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if l.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	for _, h := range l.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: certificate for %q: %w", l.CommonName, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return encode("CERTIFICATE", der), encode("EC PRIVATE KEY", keyDER), nil
}

// IssueTLS is Issue, as a tls.Certificate for a server.
func (ca *CA) IssueTLS(l Leaf) (tls.Certificate, error) {
	c, k, err := ca.Issue(l)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.X509KeyPair(c, k)
}

func encode(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return n
}
