package localkube

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// serviceIP is the first address of the service range the API server gets:
// the ClusterIP of the `kubernetes` Service, which a real serving
// certificate names too.
const (
	serviceRange = "10.0.0.0/24"
	serviceIP    = "10.0.0.1"
)

// serverNames are the names the serving certificate is valid for: those a
// pod uses for its API server, so that clients that check the certificate
// as kubernetes.default.svc (the hub does) work as they do in a cluster.
var serverNames = []string{"kubernetes.default.svc", "kubernetes.default", "kubernetes", "localhost"}

// pki is the key material one cluster needs; written to files by write.
type pki struct {
	caPEM                   []byte
	servingCert, servingKey []byte
	saPublic, saPrivate     []byte
	adminToken              string
}

// newPKI makes a CA, a serving certificate it signs, and the service
// account signing key: all ECDSA P-256, fast to generate, valid for a day
// since a cluster lives only as long as a test or a `tether dev` session.
func newPKI() (*pki, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "localkube CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}

	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     serverNames,
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.ParseIP(serviceIP)},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	srvKeyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		return nil, err
	}

	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	saPrivDER, err := x509.MarshalECPrivateKey(saKey)
	if err != nil {
		return nil, err
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}

	token := make([]byte, 32)
	rand.Read(token)

	return &pki{
		caPEM:       pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		servingCert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srvDER}),
		servingKey:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: srvKeyDER}),
		saPublic:    pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPubDER}),
		saPrivate:   pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: saPrivDER}),
		adminToken:  hex.EncodeToString(token),
	}, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

// write puts the key material into dir under the names the API server's
// flags use (see apiServerArgs).
func (p *pki) write(dir string) error {
	files := map[string][]byte{
		"ca.crt":        p.caPEM,
		"apiserver.crt": p.servingCert,
		"apiserver.key": p.servingKey,
		"sa.pub":        p.saPublic,
		"sa.key":        p.saPrivate,
		// --token-auth-file: token,user,uid,"group1,group2"
		"tokens.csv": fmt.Appendf(nil, "%s,admin,admin,system:masters\n", p.adminToken),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}
