package replicas

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"
)

func TestVerify(t *testing.T) {
	key, other := newKey(t), newKey(t)
	id, err := newIdentity("a", "10.0.0.1:8444", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	twin, err := newIdentity("a", "10.0.0.1:8444", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	good := annotations(id.member, key)
	keys := []ed25519.PublicKey{other.Public().(ed25519.PublicKey), key.Public().(ed25519.PublicKey)}
	tests := []struct {
		name  string
		lease string
		edit  func(map[string]string)
		want  string // in the error; "" for a member
	}{
		{"signed", LeasePrefix + "a", nil, ""},
		{"another name", LeasePrefix + "b", nil, errUnsigned.Error()},
		{"not a replica's lease", "a", nil, "doesn't start with"},
		{"empty name", LeasePrefix, nil, "doesn't start with"},
		{"another address", LeasePrefix + "a", func(m map[string]string) { m[AnnotationAddr] = "10.0.0.2:8444" }, errUnsigned.Error()},
		{"another certificate", LeasePrefix + "a", func(m map[string]string) { m[AnnotationCert] = annotations(twin.member, key)[AnnotationCert] }, errUnsigned.Error()},
		{"signed by a stranger", LeasePrefix + "a", func(m map[string]string) { m[AnnotationSig] = annotations(id.member, newKey(t))[AnnotationSig] }, errUnsigned.Error()},
		{"no signature", LeasePrefix + "a", func(m map[string]string) { delete(m, AnnotationSig) }, "missing"},
		{"short signature", LeasePrefix + "a", func(m map[string]string) { m[AnnotationSig] = base64.StdEncoding.EncodeToString([]byte("short")) }, "Ed25519 signature"},
		{"no address", LeasePrefix + "a", func(m map[string]string) { delete(m, AnnotationAddr) }, "missing"},
		{"address without port", LeasePrefix + "a", func(m map[string]string) { m[AnnotationAddr] = "10.0.0.1" }, "port"},
		{"address with a newline", LeasePrefix + "a", func(m map[string]string) { m[AnnotationAddr] = "a\nb:1" }, "control character"},
		{"two certificates", LeasePrefix + "a", func(m map[string]string) { m[AnnotationCert] += m[AnnotationCert] }, "one PEM CERTIFICATE"},
		{"not a certificate", LeasePrefix + "a", func(m map[string]string) {
			m[AnnotationCert] = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
		}, "x509"},
		{"huge", LeasePrefix + "a", func(m map[string]string) { m[AnnotationCert] = strings.Repeat("x", maxAnnotationLen+1) }, "over"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ann := maps.Clone(good)
			if tt.edit != nil {
				tt.edit(ann)
			}
			m, err := verify(tt.lease, ann, keys)
			if tt.want == "" {
				if err != nil || !m.equal(id.member) {
					t.Fatalf("verify = %+v, %v; want %+v", m, err, id.member)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("verify = %+v, %v; want an error with %q", m, err, tt.want)
			}
			if tt.want == errUnsigned.Error() && !errors.Is(err, errUnsigned) {
				t.Fatalf("%v is not errUnsigned", err)
			}
		})
	}
}

// FuzzVerify: a Lease's name and annotations are anyone's who may write Leases in the
// namespace. Nothing in them may crash a replica, or pass without the key's signature.
func FuzzVerify(f *testing.F) {
	key := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	id, err := newIdentity("a", "10.0.0.1:8444", time.Unix(0, 0))
	if err != nil {
		f.Fatal(err)
	}
	good := annotations(id.member, key)
	f.Add(LeasePrefix+"a", good[AnnotationAddr], good[AnnotationCert], good[AnnotationSig])
	f.Add(LeasePrefix+"b", "[::1]:1", "-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n", "AAAA")
	pub := []ed25519.PublicKey{key.Public().(ed25519.PublicKey)}
	f.Fuzz(func(t *testing.T, lease, addr, cert, sig string) {
		m, err := verify(lease, map[string]string{AnnotationAddr: addr, AnnotationCert: cert, AnnotationSig: sig}, pub)
		if err != nil {
			return
		}
		if LeasePrefix+m.Name != lease || m.PeerAddr != addr {
			t.Fatalf("verify(%q) = %+v", lease, m)
		}
		rawSig, _ := base64.StdEncoding.DecodeString(sig)
		if !ed25519.Verify(pub[0], signedMessage(m.Name, m.PeerAddr, m.Cert), rawSig) {
			t.Fatalf("verify took %q without the key's signature", lease)
		}
	})
}
