package watch

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// serviceAccountReread is how long the token and CA read from their files
// are used before the files are read again, unless Config says
// otherwise; kubelet rotates a projected token well before it expires.
const serviceAccountReread = time.Minute

// serviceAccountTransport sends requests as the pod's service account: with
// its bearer token, over TLS checked against its ca.crt. It reads both
// files again at most once per interval. A changed CA (the cluster's CA was
// rotated) is trusted from the next connection on; connections made before
// keep the CA they were checked against until they end.
type serviceAccountTransport struct {
	tokenFile, caFile, userAgent string
	every                        time.Duration

	mu    sync.Mutex // guards the following
	token string
	ca    []byte          // the PEM tr trusts
	tr    *http.Transport // trusts ca
	read  time.Time       // when the files were last read
}

func (t *serviceAccountTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	tok, tr, err := t.current()
	if err != nil {
		return nil, err
	}
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+tok)
	if t.userAgent != "" {
		req.Header.Set("User-Agent", t.userAgent)
	}
	return tr.RoundTrip(req)
}

// CloseIdleConnections closes the current transport's idle connections.
func (t *serviceAccountTransport) CloseIdleConnections() {
	t.mu.Lock()
	tr := t.tr
	t.mu.Unlock()
	if tr != nil {
		tr.CloseIdleConnections()
	}
}

// current returns the token and the transport to send a request with,
// reading the files again when they are due.
func (t *serviceAccountTransport) current() (string, *http.Transport, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.token != "" && time.Since(t.read) < t.every {
		return t.token, t.tr, nil
	}
	// A file that can't be read while it is being replaced leaves the
	// last good one in use.
	if err := t.readCALocked(); err != nil && t.tr == nil {
		return "", nil, err
	}
	if err := t.readTokenLocked(); err != nil && t.token == "" {
		return "", nil, err
	}
	t.read = time.Now()
	return t.token, t.tr, nil
}

func (t *serviceAccountTransport) readTokenLocked() error {
	b, err := os.ReadFile(t.tokenFile)
	if err != nil {
		return fmt.Errorf("the service account token: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return fmt.Errorf("the service account token: %s is empty", t.tokenFile)
	}
	t.token = tok
	return nil
}

func (t *serviceAccountTransport) readCA() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.readCALocked()
}

// readCALocked reads the CA file, and makes a new transport if it changed.
func (t *serviceAccountTransport) readCALocked() error {
	pem, err := os.ReadFile(t.caFile)
	if err != nil {
		return fmt.Errorf("the API server's CA: %w", err)
	}
	if t.tr != nil && bytes.Equal(pem, t.ca) {
		return nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return fmt.Errorf("the API server's CA: no certificate in %s", t.caFile)
	}
	old := t.tr
	t.ca, t.tr = pem, &http.Transport{
		// No proxy: HTTPS_PROXY is for the WebSocket to the hub, and the
		// agent reaches its API server directly, as its relay does.
		Proxy:               nil,
		TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout: 10 * time.Second,
		IdleConnTimeout:     90 * time.Second,
		MaxIdleConnsPerHost: 4,
		ForceAttemptHTTP2:   true,
		// Watches can be quiet for minutes: a connection silent for 30 s
		// is pinged, and closed if the ping isn't answered in 15 (as
		// client-go does), so a network that drops everything ends the
		// watch instead of leaving it open on nothing.
		HTTP2: &http.HTTP2Config{SendPingTimeout: 30 * time.Second, PingTimeout: 15 * time.Second},
	}
	if old != nil {
		old.CloseIdleConnections()
	}
	return nil
}
