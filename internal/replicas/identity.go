package replicas

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"strings"
	"time"
)

// The Lease's labels and annotations (decision 032).
const (
	LabelRole        = "tetherhq.github.io/role"
	RoleHubReplica   = "hub-replica"
	AnnotationAddr   = "tetherhq.github.io/peer-addr"
	AnnotationCert   = "tetherhq.github.io/peer-certificate"
	AnnotationSig    = "tetherhq.github.io/peer-signature"
	LeasePrefix      = "tether-replica-"
	signaturePrefix  = "tether-peer-v1\n"
	maxAnnotationLen = 8 << 10 // a P-256 certificate's PEM is under 1 KiB
)

// identity is what a replica publishes of itself: its name, where peers reach it, and the
// certificate it presents to them, with the key that proves it.
type identity struct {
	member Member
	cert   tls.Certificate
}

// newIdentity makes a replica's peer certificate: a fresh P-256 key that lives in memory only,
// in a self-signed certificate. Peers trust it because its DER is in a signed Lease, not
// through any chain, so its names and dates matter to nobody; it outlasts any process.
func newIdentity(name, addr string, now time.Time) (identity, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return identity{}, fmt.Errorf("make a peer key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return identity{}, fmt.Errorf("make a peer certificate serial: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: LeasePrefix + name},
		DNSNames:     []string{LeasePrefix + name},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(100 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return identity{}, fmt.Errorf("make a peer certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return identity{}, fmt.Errorf("make a peer certificate: %w", err)
	}
	return identity{
		member: Member{Name: name, PeerAddr: addr, Cert: der},
		cert:   tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf},
	}, nil
}

// signedMessage is what the peer-signature annotation signs. A name never holds a newline (it
// is part of a Lease's name) and the digest has a fixed length, so no two (name, address,
// certificate) give the same message.
func signedMessage(name, addr string, der []byte) []byte {
	sum := sha256.Sum256(der)
	return []byte(signaturePrefix + name + "\n" + addr + "\n" + hex.EncodeToString(sum[:]))
}

// annotations are the Lease annotations that publish m, signed with key.
func annotations(m Member, key ed25519.PrivateKey) map[string]string {
	return map[string]string{
		AnnotationAddr: m.PeerAddr,
		AnnotationCert: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: m.Cert})),
		AnnotationSig:  base64.StdEncoding.EncodeToString(ed25519.Sign(key, signedMessage(m.Name, m.PeerAddr, m.Cert))),
	}
}

var errUnsigned = errors.New("not signed with the hub's signing key")

// verify reads the member a Lease named leaseName publishes in its annotations, and checks
// that one of keys signed it. Anyone allowed to write Leases in the namespace can write
// these: they are untrusted until the signature holds.
func verify(leaseName string, ann map[string]string, keys []ed25519.PublicKey) (Member, error) {
	name, ok := strings.CutPrefix(leaseName, LeasePrefix)
	if !ok || name == "" {
		return Member{}, fmt.Errorf("lease name %q doesn't start with %q", leaseName, LeasePrefix)
	}
	addr, certPEM, sig := ann[AnnotationAddr], ann[AnnotationCert], ann[AnnotationSig]
	for k, v := range map[string]string{AnnotationAddr: addr, AnnotationCert: certPEM, AnnotationSig: sig} {
		if v == "" {
			return Member{}, fmt.Errorf("annotation %s is missing", k)
		}
		if len(v) > maxAnnotationLen {
			return Member{}, fmt.Errorf("annotation %s is %d bytes, over %d", k, len(v), maxAnnotationLen)
		}
	}
	if err := checkAddr(addr); err != nil {
		return Member{}, fmt.Errorf("annotation %s: %w", AnnotationAddr, err)
	}
	block, rest := pem.Decode([]byte(certPEM))
	if block == nil || block.Type != "CERTIFICATE" || strings.TrimSpace(string(rest)) != "" {
		return Member{}, fmt.Errorf("annotation %s must hold one PEM CERTIFICATE block", AnnotationCert)
	}
	if _, err := x509.ParseCertificate(block.Bytes); err != nil {
		return Member{}, fmt.Errorf("annotation %s: %w", AnnotationCert, err)
	}
	rawSig, err := base64.StdEncoding.DecodeString(sig)
	if err != nil || len(rawSig) != ed25519.SignatureSize {
		return Member{}, fmt.Errorf("annotation %s must be a base64 Ed25519 signature", AnnotationSig)
	}
	msg := signedMessage(name, addr, block.Bytes)
	for _, k := range keys {
		if ed25519.Verify(k, msg, rawSig) {
			return Member{Name: name, PeerAddr: addr, Cert: block.Bytes}, nil
		}
	}
	return Member{}, errUnsigned
}

// checkAddr checks a peer address is host:port with nothing a log line or the signed message
// could be confused by.
func checkAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if host == "" || port == "" {
		return fmt.Errorf("%q is not host:port", addr)
	}
	for _, c := range addr {
		if c <= ' ' || c == 0x7f {
			return fmt.Errorf("%q holds a space or control character", addr)
		}
	}
	return nil
}
