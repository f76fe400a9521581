package watch

import (
	"crypto/tls"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/pki"
	"github.com/tetherhq/tether/internal/testutil/files"
)

// TestServiceAccountRotation: the inventory's client reads the token and
// ca.crt again as they rotate, and checks the API server against a new CA
// from its next connection on, as when the cluster's CA is replaced and
// the API server restarts with a certificate from it.
func TestServiceAccountRotation(t *testing.T) {
	newCert := func() (*pki.CA, *tls.Certificate) {
		ca, err := pki.NewCA("test cluster CA", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		cert, err := ca.IssueTLS(pki.Leaf{CommonName: "kube-apiserver", Hosts: []string{"127.0.0.1"}})
		if err != nil {
			t.Fatal(err)
		}
		return ca, &cert
	}
	var serving atomic.Pointer[tls.Certificate]
	var token atomic.Value
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token.Store(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
	}))
	// Its own TLS listener: httptest's StartTLS would serve its own
	// certificate to a client that sends no server name.
	srv.Listener = tls.NewListener(srv.Listener, &tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return serving.Load(), nil }})
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake
	ca1, cert1 := newCert()
	serving.Store(cert1)
	srv.Start()
	defer srv.Close()
	host := "https://" + srv.Listener.Addr().String()

	dir := t.TempDir()
	caFile, tokenFile := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "token")
	files.Replace(t, caFile, string(ca1.CertPEM))
	files.Replace(t, tokenFile, "token-1\n")
	a, err := newAPIServer(Config{Host: host, CAFile: caFile, TokenFile: tokenFile})
	if err != nil {
		t.Fatal(err)
	}
	defer a.client.CloseIdleConnections()
	a.client.Transport.(*serviceAccountTransport).every = 0 // read the files for every request
	get := func(want string) error {
		t.Helper()
		resp, err := a.client.Get(host + "/api")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if got := token.Load(); got != want {
			t.Errorf("the API server got token %q, want %q", got, want)
		}
		return nil
	}
	if err := get("token-1"); err != nil {
		t.Fatal(err)
	}

	ca2, cert2 := newCert()
	serving.Store(cert2)
	srv.CloseClientConnections()
	files.Replace(t, caFile, string(ca2.CertPEM))
	files.Replace(t, tokenFile, "token-2")
	if err := get("token-2"); err != nil {
		t.Fatalf("after the CA and token rotated: %v", err)
	}

	// A ca.crt caught while it is being replaced keeps the last CA.
	files.Replace(t, caFile, "")
	if err := get("token-2"); err != nil {
		t.Fatalf("with an empty ca.crt: %v", err)
	}
	// The CA is checked: the old one fails on a new connection.
	files.Replace(t, caFile, string(ca1.CertPEM))
	srv.CloseClientConnections()
	if err := get("token-2"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("with the old CA back in ca.crt: %v; want a certificate error", err)
	}
}

// TestTokenRereadFollowsTheSetting: the inventory reads the token and CA
// again as often as TETHER_TOKEN_REREAD_SECONDS says, as the relay's
// hello does, and every minute without it.
func TestTokenRereadFollowsTheSetting(t *testing.T) {
	ca, err := pki.NewCA("test cluster CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	caFile, tokenFile := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "token")
	files.Replace(t, caFile, string(ca.CertPEM))
	files.Replace(t, tokenFile, "token-1\n")
	for set, want := range map[time.Duration]time.Duration{0: serviceAccountReread, 7 * time.Second: 7 * time.Second} {
		a, err := newAPIServer(Config{Host: "https://127.0.0.1:1", CAFile: caFile, TokenFile: tokenFile, TokenReread: set})
		if err != nil {
			t.Fatal(err)
		}
		if got := a.client.Transport.(*serviceAccountTransport).every; got != want {
			t.Errorf("TokenReread %s: read again every %s, want %s", set, got, want)
		}
	}
}
