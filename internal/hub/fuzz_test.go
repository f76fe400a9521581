package hub

import (
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/tetherhq/tether/internal/pki"
	"github.com/tetherhq/tether/internal/protocol"
	"github.com/tetherhq/tether/internal/testutil/syncbuf"
)

// FuzzAgentUpgradeHeaders: whatever name and Authorization an upgrade
// request carries, the hub admits only the listed name with its token, and
// its log lines quote the name.
func FuzzAgentUpgradeHeaders(f *testing.F) {
	for _, s := range [][2]string{
		{"eu-1", "Bearer " + testToken}, {"eu-1", "Bearer  " + testToken + " "}, {"eu-1", "bearer " + testToken},
		{"EU-1", "Bearer " + testToken}, {"eu-1\n", "Bearer " + testToken}, {"", ""}, {"eu-1", testToken},
		{"x\"\nINFO forged line", "Bearer x"}, {strings.Repeat("n", 300), "Bearer " + strings.Repeat("t", 5000)},
	} {
		f.Add(s[0], s[1])
	}
	logs := &syncbuf.Buffer{}
	h, err := New(Config{Agents: testAgents("eu-1"), Logger: slogTo(logs)})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, name, authz string) {
		logs.Reset()
		r := httptest.NewRequest("GET", "/api/agent", nil)
		r.Header["Tether-Agent"] = []string{name}
		r.Header["Authorization"] = []string{authz}
		w := httptest.NewRecorder()
		h.serveAgent(w, r, false)
		// The hub takes the token with or without "Bearer ".
		token, _ := strings.CutPrefix(authz, "Bearer ")
		match := name == "eu-1" && strings.TrimSpace(token) == testToken
		if match != (w.Code != http.StatusUnauthorized) {
			t.Fatalf("name %q, Authorization %q: %d", name, authz, w.Code)
		}
		for _, line := range strings.Split(strings.TrimSuffix(logs.String(), "\n"), "\n") {
			if line != "" && !strings.Contains(line, "An agent was refused") && !strings.Contains(line, "upgrade") {
				t.Fatalf("an unexpected log line: %q", line)
			}
		}
		if strings.Contains(logs.String(), testToken) {
			t.Fatal("the token reached the log")
		}
	})
}

// FuzzCheckHello: a hello the hub accepts has a short printable version and
// a host:port address.
func FuzzCheckHello(f *testing.F) {
	for _, s := range [][2]string{
		{"v0.1.0", "10.96.0.1:443"}, {"", "[fd00::1]:6443"}, {"v1\nINFO forged", "h:1"}, {strings.Repeat("v", 200), "h:1"},
		{"v1", "h"}, {"v1", ":443"}, {"v1", "h:0"}, {"v1", "h:65536"}, {"v1", "h :1"}, {"v1", "h:+1"}, {"\xff", "h:1"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, version, apiServer string) {
		err := checkHello(protocol.Message{Type: protocol.TypeHello, AgentVersion: version, APIServer: apiServer})
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error on more than one line: %q", err)
			}
			return
		}
		if len(version) > maxAgentVersion || strings.ContainsFunc(version, unicode.IsControl) {
			t.Fatalf("accepted the version %q", version)
		}
		if strings.ContainsFunc(apiServer, unicode.IsControl) || !strings.Contains(apiServer, ":") {
			t.Fatalf("accepted the address %q", apiServer)
		}
	})
}

// FuzzParseCA: the hub keeps a hello's caCert as the DER of the
// certificates in it, and accepts and trusts exactly what
// x509.CertPool.AppendCertsFromPEM would.
func FuzzParseCA(f *testing.F) {
	ca, err := pki.NewCA("fuzz CA", time.Hour)
	if err != nil {
		f.Fatal(err)
	}
	other, err := pki.NewCA("other CA", time.Hour)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(ca.CertPEM)
	f.Add(append(append([]byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"), ca.CertPEM...), other.CertPEM...))
	f.Add([]byte("-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n"))
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nProc-Type: 4,ENCRYPTED\n\nAAAA\n-----END CERTIFICATE-----\n"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, data []byte) {
		got := parseCA(data)
		want := x509.NewCertPool()
		if ok := want.AppendCertsFromPEM(data); ok != (len(got) > 0) {
			t.Fatalf("AppendCertsFromPEM says %v, parseCA found %d certificates", ok, len(got))
		}
		pool := x509.NewCertPool()
		for _, der := range got {
			cert, err := x509.ParseCertificate(der)
			if err != nil {
				t.Fatalf("parseCA kept DER that doesn't parse: %v", err)
			}
			pool.AddCert(cert)
		}
		if !pool.Equal(want) {
			t.Fatal("parseCA trusts other certificates than AppendCertsFromPEM")
		}
	})
}
