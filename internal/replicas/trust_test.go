package replicas

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestUnsignedLeasesIgnored(t *testing.T) {
	ns, key, oldKey, otherKey := newNamespace(t), newKey(t), newKey(t), newKey(t)
	leases := adminLeases(t, ns)
	bad := map[string]func(ann map[string]string){
		"stranger": nil, // signed with another key, below
		"garbage":  func(ann map[string]string) { ann[AnnotationSig] = "not base64!" },
		"moved":    func(ann map[string]string) { ann[AnnotationAddr] = "203.0.113.9:8444" },
		"nocert":   func(ann map[string]string) { delete(ann, AnnotationCert) },
	}
	for name, spoil := range bad {
		signer := key
		if spoil == nil {
			signer = otherKey
		}
		l := signedLease(t, ns, name, signer, time.Now())
		if spoil != nil {
			spoil(l.Annotations)
		}
		if _, err := leases.Create(context.Background(), l, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Signed with the key before a rotation, which the key file still holds second.
	if _, err := leases.Create(context.Background(), signedLease(t, ns, "rotated", oldKey, time.Now()), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	var logs logLines
	cfg := testConfig(t, ns, "a", key)
	cfg.SigningKeys = append(cfg.SigningKeys, oldKey)
	cfg.LeaseDuration, cfg.RenewInterval = time.Minute, 20*time.Second
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	a := join(t, cfg)
	if got := memberNames(a.Members()); got != "rotated" {
		t.Fatalf("members: [%s], want [rotated]", got)
	}

	// Renewed, the bad Leases are still not members, nor warned of again.
	for name := range bad {
		l, err := leases.Get(context.Background(), LeasePrefix+name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		now := metav1.NewMicroTime(time.Now())
		l.Spec.RenewTime = &now
		if _, err := leases.Update(context.Background(), l, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	bcfg := testConfig(t, ns, "b", key)
	bcfg.LeaseDuration, bcfg.RenewInterval = cfg.LeaseDuration, cfg.RenewInterval
	join(t, bcfg)
	waitMembers(t, a, 10*time.Second, "b", "rotated")
	for name := range bad {
		if n := strings.Count(logs.String(), "lease="+LeasePrefix+name+" "); n != 1 {
			t.Errorf("%d warnings about %s, want 1:\n%s", n, name, logs.String())
		}
	}
	if strings.Contains(logs.String(), "lease="+LeasePrefix+"rotated ") {
		t.Errorf("a warning about the rotated key's Lease:\n%s", logs.String())
	}
}

// tlsServer accepts connections with cfg and reports each handshake's error, echoing a byte
// on those that succeed.
func tlsServer(t *testing.T, cfg *tls.Config) (addr string, handshakes <-chan error) {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	results := make(chan error, 10)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			err = c.(*tls.Conn).HandshakeContext(context.Background())
			results <- err
			if err == nil {
				b := make([]byte, 1)
				if _, err := io.ReadFull(c, b); err == nil {
					c.Write(b)
				}
			}
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String(), results
}

// dial handshakes with addr and echoes a byte: TLS 1.3 reports a refused client certificate
// only on the first read.
func dial(addr string, cfg *tls.Config) error {
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	if c.ConnectionState().Version != tls.VersionTLS13 {
		return errors.New("not TLS 1.3")
	}
	if _, err := c.Write([]byte{'x'}); err != nil {
		return err
	}
	b := make([]byte, 1)
	_, err = io.ReadFull(c, b)
	return err
}

func TestPeerTLS(t *testing.T) {
	ns, key := newNamespace(t), newKey(t)
	long := func(name string) Config {
		cfg := testConfig(t, ns, name, key)
		cfg.LeaseDuration, cfg.RenewInterval = time.Minute, 20*time.Second
		return cfg
	}
	a, b := join(t, long("a")), join(t, long("b"))
	waitMembers(t, a, 10*time.Second, "b")
	waitMembers(t, b, 10*time.Second, "a")
	addr, handshakes := tlsServer(t, a.ServerTLS())

	if err := dial(addr, b.ClientTLS("a")); err != nil {
		t.Fatalf("b to a: %v", err)
	}
	if err := <-handshakes; err != nil {
		t.Fatalf("a's side of b to a: %v", err)
	}

	// A stranger calling itself b, with a certificate of its own that no Lease publishes.
	strangerID, err := newIdentity("b", "127.0.0.1:1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	stranger := &Replicas{self: strangerID, members: []Member{a.Self(), b.Self()}}
	if err := dial(addr, stranger.ClientTLS("a")); err == nil {
		t.Error("a took a stranger's certificate")
	}
	if err := <-handshakes; err == nil || !strings.Contains(err.Error(), "not a live hub replica") {
		t.Errorf("a's side of the stranger's call: %v", err)
	}

	// The stranger's server, as if it were at a's address.
	strangerAddr, strangerHandshakes := tlsServer(t, stranger.ServerTLS())
	if err := dial(strangerAddr, b.ClientTLS("a")); err == nil || !strings.Contains(err.Error(), "not a live hub replica") {
		t.Errorf("b to a stranger posing as a: %v", err)
	}
	<-strangerHandshakes
	if err := dial(addr, b.ClientTLS("nobody")); err == nil {
		t.Error("b dialled a replica that isn't a member")
	}
	<-handshakes

	// Once b is gone, a no longer takes its certificate.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	waitMembers(t, a, 10*time.Second)
	if err := dial(addr, b.ClientTLS("a")); err == nil {
		t.Error("a took the certificate of a replica that left")
	}
	if err := <-handshakes; err == nil {
		t.Error("a's side: the certificate of a replica that left was taken")
	}
}

func TestWritesAtRest(t *testing.T) {
	ns, key := newNamespace(t), newKey(t)
	var rs []*Replicas
	var ws []*writes
	for _, name := range []string{"a", "b", "c"} {
		cfg, w := countedConfig(t, ns, name, key)
		rs, ws = append(rs, join(t, cfg)), append(ws, w)
	}
	for i, r := range rs {
		var others []string
		for j, o := range rs {
			if j != i {
				others = append(others, o.Self().Name)
			}
		}
		waitMembers(t, r, 10*time.Second, others...)
	}
	renew := rs[0].renew
	start := time.Now()
	base := make([]int, len(ws))
	for i, w := range ws {
		base[i] = w.count()
	}
	const renewals = 10
	timeout := time.After(time.Minute)
	for ws[0].count() < base[0]+renewals {
		select {
		case <-ws[0].made:
		case <-timeout:
			t.Fatalf("a made %d writes in a minute", ws[0].count()-base[0])
		}
	}
	took := time.Since(start)
	if took < (renewals-1)*renew {
		t.Errorf("a wrote %d times in %s: more than once a renewal interval (%s)", renewals, took, renew)
	}
	limit := int(took/renew) + 1
	for i, w := range ws {
		n := w.count() - base[i]
		t.Logf("%s: %d writes of Leases in %s (%.2f/s; renewal every %s)", rs[i].Self().Name, n, took.Round(time.Millisecond), float64(n)/took.Seconds(), renew)
		if n > limit {
			t.Errorf("%s made %d writes in %s, over one a renewal (%d)", rs[i].Self().Name, n, took, limit)
		}
		w.mu.Lock()
		if w.methods["POST"] != 1 || len(w.methods) != 2 {
			t.Errorf("%s's writes of Leases by method: %v, want one POST and PUTs", rs[i].Self().Name, w.methods)
		}
		w.mu.Unlock()
	}
}
