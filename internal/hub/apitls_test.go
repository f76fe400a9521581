package hub

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"regexp"
	"testing"
	"time"
)

// issuer signs test certificates from templates, as a CA or an
// intermediate.
type issuer struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// issue signs tmpl with by's key (self-signed when by is nil).
func issue(t *testing.T, by *issuer, tmpl *x509.Certificate) *issuer {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = serial
	parent, signer := tmpl, key
	if by != nil {
		parent, signer = by.cert, by.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &issuer{cert: cert, key: key}
}

func caTemplate(name string) *x509.Certificate {
	return &x509.Certificate{
		Subject: pkix.Name{CommonName: name}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
}

// leafTemplate is a serving certificate for hosts, valid now; change makes
// it something else.
func leafTemplate(change func(*x509.Certificate), hosts ...string) *x509.Certificate {
	tmpl := &x509.Certificate{
		Subject: pkix.Name{CommonName: "kube-apiserver"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	if change != nil {
		change(tmpl)
	}
	return tmpl
}

// handshake makes a TLS handshake between a server presenting chain (the
// first one's key) and a client with cfg, and returns the client's error.
func handshake(t *testing.T, chain []*issuer, cfg *tls.Config) error {
	t.Helper()
	var cert tls.Certificate
	for _, c := range chain {
		cert.Certificate = append(cert.Certificate, c.cert.Raw)
	}
	cert.PrivateKey = chain[0].key
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		s := tls.Server(conn, &tls.Config{Certificates: []tls.Certificate{cert}})
		s.SetDeadline(time.Now().Add(10 * time.Second))
		s.Handshake()
		s.Close()
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c := tls.Client(conn, cfg)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	err = c.Handshake()
	c.Close()
	<-done
	return err
}

// TestAPIServerCertificateCheckedAsCryptoTLSWould: the hub checks the API
// server's certificate in VerifyConnection (so no parsed root pool stays
// with a kept connection). Each chain below is offered to a client with
// crypto/tls's own check and to one with the hub's: both must come to the
// same verdict, the one expected.
func TestAPIServerCertificateCheckedAsCryptoTLSWould(t *testing.T) {
	ca := issue(t, nil, caTemplate("cluster CA"))
	other := issue(t, nil, caTemplate("another CA"))
	inter := issue(t, ca, caTemplate("intermediate"))
	notCA := issue(t, ca, leafTemplate(nil, APIServerName)) // a leaf, used to sign below
	leaf := func(by *issuer, change func(*x509.Certificate), hosts ...string) *issuer {
		return issue(t, by, leafTemplate(change, hosts...))
	}
	for _, tc := range []struct {
		name       string
		chain      []*issuer
		serverName string
		ok         bool
	}{
		{"signed by the CA", []*issuer{leaf(ca, nil, APIServerName)}, APIServerName, true},
		{"signed by another CA", []*issuer{leaf(other, nil, APIServerName)}, APIServerName, false},
		{"for another name", []*issuer{leaf(ca, nil, "example.com")}, APIServerName, false},
		{"expired", []*issuer{leaf(ca, func(c *x509.Certificate) { c.NotAfter = time.Now().Add(-time.Minute) }, APIServerName)}, APIServerName, false},
		{"not valid yet", []*issuer{leaf(ca, func(c *x509.Certificate) { c.NotBefore = time.Now().Add(time.Hour) }, APIServerName)}, APIServerName, false},
		{"for clients only", []*issuer{leaf(ca, func(c *x509.Certificate) { c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth} }, APIServerName)}, APIServerName, false},
		{"through an intermediate it sends", []*issuer{leaf(inter, nil, APIServerName), inter}, APIServerName, true},
		{"through an intermediate it doesn't send", []*issuer{leaf(inter, nil, APIServerName)}, APIServerName, false},
		{"signed by a certificate that is no CA", []*issuer{leaf(notCA, nil, APIServerName), notCA}, APIServerName, false},
		{"the CA itself", []*issuer{ca}, APIServerName, false},
		{"for an IP address", []*issuer{leaf(ca, nil, "127.0.0.1")}, "127.0.0.1", true},
		{"for a name, reached by IP address", []*issuer{leaf(ca, nil, APIServerName)}, "127.0.0.1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			roots := x509.NewCertPool()
			roots.AddCert(ca.cert)
			theirs := handshake(t, tc.chain, &tls.Config{RootCAs: roots, ServerName: tc.serverName})
			c := &agentConn{name: "c", ca: [][]byte{ca.cert.Raw}, hub: &Hub{cfg: Config{Direct: map[string]DirectServer{"c": {ServerName: tc.serverName}}}}}
			ours := handshake(t, tc.chain, c.apiTLSConfig())
			if (theirs == nil) != tc.ok {
				t.Fatalf("crypto/tls's own check: %v; the test expects ok=%v", theirs, tc.ok)
			}
			if (ours == nil) != tc.ok {
				t.Errorf("the hub's check: %v, want ok=%v (crypto/tls's: %v)", ours, tc.ok, theirs)
			}
			// An expiry message names the moment of each check, which may
			// fall in different seconds; the rest must match.
			if theirs != nil && ours != nil && withoutNow(theirs) != withoutNow(ours) {
				t.Errorf("the hub's check refused with %q, crypto/tls's with %q", ours, theirs)
			}
		})
	}
}

var checkedAt = regexp.MustCompile(`current time \S+`)

func withoutNow(err error) string {
	return checkedAt.ReplaceAllString(err.Error(), "current time T")
}
