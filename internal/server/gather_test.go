package server

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/pki"
	"github.com/tetherhq/tether/internal/testutil/fakecluster"
	"github.com/tetherhq/tether/internal/testutil/syncbuf"
)

// tlsHub serves the hub with settings, over TLS with a certificate from a
// CA of its own, on a listener whose connections count the writes that
// reach them. It returns the hub's base URL, its CA, the count and the
// hub's log.
func tlsHub(t *testing.T, settings map[string]string) (string, *pki.CA, *atomic.Int64, *syncbuf.Buffer) {
	t.Helper()
	hubCA, err := pki.NewCA("hub CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := hubCA.Issue(pki.Leaf{CommonName: "hub", Hosts: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// The chain ends with the hub's private CA, which kubeconfigs carry.
	for name, b := range map[string][]byte{"hub.crt": append(certPEM, hubCA.CertPEM...), "hub.key": keyPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	settings["TETHER_TLS_CERT_FILE"] = filepath.Join(dir, "hub.crt")
	settings["TETHER_TLS_KEY_FILE"] = filepath.Join(dir, "hub.key")
	opts := optionsOn(t, settings)
	writes := &atomic.Int64{}
	opts.Listener = writeCountingListener{opts.Listener, writes}
	logs := serve(t, opts)
	return "https://" + opts.Listener.Addr().String(), hubCA, writes, logs
}

type writeCountingListener struct {
	net.Listener
	writes *atomic.Int64
}

func (l writeCountingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return writeCountingConn{c, l.writes}, nil
}

type writeCountingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c writeCountingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// TestChunkedAnswerGoesOutAPiecePerWrite: an answer of unknown length
// reaches the client through the hub's TLS intact, in about one system
// call per piece the proxy copies (32 KiB), where net/http's chunked
// framing makes four writes of each; and over HTTP/2, and a stream's first
// event arrives while the API server holds the second.
func TestChunkedAnswerGoesOutAPiecePerWrite(t *testing.T) {
	fc := fakecluster.New(t)
	cert, err := fc.CA.IssueTLS(pki.Leaf{CommonName: "kube-apiserver", Hosts: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	fc.Srv.TLS.Certificates = []tls.Certificate{cert}
	base, hubCA, writes, _ := tlsHub(t, map[string]string{
		"TETHER_PUBLIC_URL": "https://hub.example.com",
		"TETHER_FLEET_CLUSTERS": fmt.Sprintf("- {name: staging, server: %s, caFile: %s, tokenFile: %s}\n",
			fc.Srv.URL, filepath.Join(fc.SADir, "ca.crt"), filepath.Join(fc.SADir, "token")),
		"TETHER_METRICS_ADDR": "0",
		"TETHER_USERS":        "- {name: ann, token: " + strings.Repeat("a", 32) + "}\n",
	})
	get := func(client *http.Client, path string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", base+path, nil)
		req.Header.Set("Authorization", "Bearer "+strings.Repeat("a", 32))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	h1 := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: hubCA.Pool()}}}
	h2 := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: hubCA.Pool()}, ForceAttemptHTTP2: true}}
	defer h1.CloseIdleConnections()
	defer h2.CloseIdleConnections()

	eventually(t, 10*time.Second, "staging answers", func() bool {
		resp := get(h1, "/clusters/staging/version")
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == 200
	})

	const size = 256 << 10 // /large: one chunked answer
	before := writes.Load()
	resp := get(h1, "/clusters/staging/large")
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	n := writes.Load() - before
	if resp.ProtoMajor != 1 || resp.ContentLength != -1 || len(b) != size || !bytes.Equal(b, make([]byte, size)) {
		t.Fatalf("/large over %s: length %d, read %d bytes", resp.Proto, resp.ContentLength, len(b))
	}
	// 8 pieces, the head, the last chunk; net/http alone makes 33.
	if pieces := size / (32 << 10); n > int64(pieces+4) {
		t.Errorf("the answer took %d writes to the client's socket, want at most %d", n, pieces+4)
	}
	t.Logf("%d KiB chunked: %d writes", size>>10, n)

	resp = get(h2, "/clusters/staging/large")
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || len(b) != size {
		t.Fatalf("/large over %s: read %d bytes", resp.Proto, len(b))
	}

	resp = get(h1, "/clusters/staging/stream")
	defer resp.Body.Close()
	first := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(resp.Body).ReadString('\n')
		first <- line
	}()
	select {
	case line := <-first:
		if line != "event 1\n" {
			t.Errorf("the stream began with %q", line)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stream's first event didn't arrive while the API server held the second")
	}
	fc.Release()
}
