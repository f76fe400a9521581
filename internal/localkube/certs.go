package localkube

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/tetherhq/tether/internal/pki"
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

// keyMaterial is the key material one cluster needs; written to files by write.
type keyMaterial struct {
	caPEM                   []byte
	servingCert, servingKey []byte
	// The node's kubelet serves with kubeletCert; the API server calls
	// it with kubeletClientCert, which the kubelet demands.
	kubeletCert, kubeletKey             []byte
	kubeletClientCert, kubeletClientKey []byte
	saPublic, saPrivate                 []byte
	adminToken                          string
}

// Lifetime is how long a cluster's certificates and the tokens it makes
// are valid: a year, so that a `tether dev` left running doesn't stop
// working (they were valid for a day).
const Lifetime = 365 * 24 * time.Hour

// kubeletClientName is the common name of the API server's client
// certificate for kubelets, the only one the node's kubelet takes.
const kubeletClientName = "kube-apiserver-kubelet-client"

// newKeyMaterial makes a CA, the certificates it signs (the API server's, the
// kubelet's, and the API server's client certificate for the kubelet), and
// the service account signing key: all ECDSA P-256, fast to generate, valid
// for a year: a cluster lives only as long as a test or a `tether dev`
// session, and a session may be left running for days.
func newKeyMaterial() (*keyMaterial, error) {
	ca, err := pki.NewCA("localkube CA", Lifetime)
	if err != nil {
		return nil, err
	}
	p := &keyMaterial{caPEM: ca.CertPEM}
	if p.servingCert, p.servingKey, err = ca.Issue(pki.Leaf{
		CommonName: "kube-apiserver",
		Hosts:      append(slices.Clone(serverNames), "127.0.0.1", serviceIP),
	}); err != nil {
		return nil, err
	}
	// The API server dials the node's InternalIP, 127.0.0.1.
	if p.kubeletCert, p.kubeletKey, err = ca.Issue(pki.Leaf{
		CommonName:   "system:node:" + NodeName,
		Organization: []string{"system:nodes"},
		Hosts:        []string{NodeName, "localhost", "127.0.0.1"},
	}); err != nil {
		return nil, err
	}
	if p.kubeletClientCert, p.kubeletClientKey, err = ca.Issue(pki.Leaf{CommonName: kubeletClientName, Client: true}); err != nil {
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
	p.saPublic = pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPubDER})
	p.saPrivate = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: saPrivDER})

	token := make([]byte, 32)
	rand.Read(token)
	p.adminToken = hex.EncodeToString(token)
	return p, nil
}

// write puts the key material into dir under the names the API server's
// flags use (see apiServerArgs).
func (p *keyMaterial) write(dir string) error {
	files := map[string][]byte{
		"ca.crt":        p.caPEM,
		"apiserver.crt": p.servingCert,
		"apiserver.key": p.servingKey,
		"kubelet.crt":   p.kubeletCert,
		"kubelet.key":   p.kubeletKey,
		// Named as kubeadm names them.
		"apiserver-kubelet-client.crt": p.kubeletClientCert,
		"apiserver-kubelet-client.key": p.kubeletClientKey,
		"sa.pub":                       p.saPublic,
		"sa.key":                       p.saPrivate,
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
