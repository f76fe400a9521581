package dev

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"sigs.k8s.io/yaml"

	"github.com/tetherhq/tether/internal/localkube"
	"github.com/tetherhq/tether/internal/testutil/syncbuf"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// tether dev listens on 127.0.0.1 only (SPEC section 7): an --addr off
// loopback is refused before anything starts, with an error that says what
// to give instead; a loopback one gets past the check. Run is given a source
// tree that isn't one, so that past the check it stops at once, where it
// would start the API server, without building or starting anything.
func TestRunListensOnLoopbackOnly(t *testing.T) {
	for _, tc := range []struct {
		addr     string
		loopback bool
	}{
		{"0.0.0.0:8080", false},
		{":8080", false}, // every interface
		{"[::]:8080", false},
		{"192.168.1.20:8080", false},
		{"10.0.0.5:8443", false},
		{"tether.example.com:8080", false},
		{"127.0.0.1", false}, // no port
		{"18080", false},     // no host
		// Port 0: past the check the hub's address is taken first.
		{"127.0.0.1:0", true},
		{"[::1]:0", true},
		{"localhost:0", true}, // as 127.0.0.1:0
	} {
		t.Run(tc.addr, func(t *testing.T) {
			var out bytes.Buffer
			err := Run(t.Context(), Config{
				Addr:   tc.addr,
				Logger: slog.New(slog.DiscardHandler),
				Out:    &out,
				Build:  localkube.BuildOptions{SourceDir: t.TempDir(), CacheDir: t.TempDir()},
			})
			if err == nil {
				t.Fatal("Run returned nil without a source tree to build the API server from")
			}
			refused := strings.Contains(err.Error(), "loopback only")
			if !tc.loopback {
				if !refused || !strings.Contains(err.Error(), strconv.Quote(tc.addr)) || !strings.Contains(err.Error(), "127.0.0.1:8080") {
					t.Errorf("--addr %s: got %v, want an error that says loopback only, quotes the address and gives 127.0.0.1:8080 as an example", tc.addr, err)
				}
				if out.Len() > 0 {
					t.Errorf("--addr %s is refused only after Run began:\n%s", tc.addr, out.String())
				}
				return
			}
			if refused {
				t.Errorf("--addr %s refused: %v", tc.addr, err)
			}
			if !strings.Contains(out.String(), "Starting a local Kubernetes API server") {
				t.Errorf("--addr %s: Run didn't go on to start the API server (%v); it printed %q", tc.addr, err, out.String())
			}
		})
	}
}

// TestRunSaysAtOnceTheAddressIsTaken: the hub's address is taken before
// anything starts, so a second tether dev says so at once, not after
// starting and stopping an API server.
func TestRunSaysAtOnceTheAddressIsTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var out bytes.Buffer
	err = Run(t.Context(), Config{
		Addr:   ln.Addr().String(),
		Logger: slog.New(slog.DiscardHandler),
		Out:    &out,
		Build:  localkube.BuildOptions{SourceDir: t.TempDir(), CacheDir: t.TempDir()},
	})
	if err == nil || !strings.Contains(err.Error(), "the hub can't listen on "+ln.Addr().String()) || !strings.Contains(err.Error(), "choose another with --addr") {
		t.Errorf("with the address taken: %v", err)
	}
	if out.Len() > 0 {
		t.Errorf("it began before it found the address taken:\n%s", out.String())
	}
}

// TestRunOnAnyLoopbackAddress: every loopback address passes Run's check,
// port 0 included, so what Run prints, the kubeconfig and the agent name
// the hub where it really listens: the port the kernel picked (they said
// port 0), and an address the hub's certificate names (it named 127.0.0.1
// and ::1 only, and the agent on 127.0.0.2 never connected). The agent
// connects, the printed address has a port, and a request made with the
// kubeconfig alone (its server, CA and token) reaches the cluster.
func TestRunOnAnyLoopbackAddress(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a local API server")
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out, logs := &syncbuf.Buffer{}, &syncbuf.Buffer{}
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{Addr: "127.0.0.2:0", Logger: slog.New(slog.NewTextHandler(logs, nil)), Out: out})
	}()
	deadline := time.After(3 * time.Minute)
	for !strings.Contains(logs.String(), "Connected to") {
		if strings.Contains(logs.String(), "Can't reach the hub") {
			t.Fatalf("with --addr 127.0.0.2:0 the agent can't reach the hub:\n%s", logs)
		}
		select {
		case err := <-done:
			t.Fatalf("Run returned %v:\n%s", err, out)
		case <-deadline:
			t.Fatalf("the agent never connected:\n%s", logs)
		case <-time.After(100 * time.Millisecond):
		}
	}
	m := regexp.MustCompile(`hub:\s+(https://127\.0\.0\.2:(\d+))`).FindStringSubmatch(out.String())
	if m == nil || m[2] == "0" {
		t.Fatalf("Run printed no hub address on 127.0.0.2 with the port it listens on:\n%s", out)
	}
	// The kubeconfig names the hub at that address, and reaches the
	// cluster through it: its CA takes the hub's certificate for
	// 127.0.0.2, and the hub listens on that port.
	k := regexp.MustCompile(`kubeconfig:\s+(\S+)`).FindStringSubmatch(out.String())
	if k == nil {
		t.Fatalf("Run printed no kubeconfig:\n%s", out)
	}
	server, client, token := readKubeconfig(t, k[1])
	if want := m[1] + "/clusters/" + ClusterName; server != want {
		t.Errorf("the kubeconfig's server is %s, want %s", server, want)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, server+"/version", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET /version with the kubeconfig: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	client.CloseIdleConnections()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /version with the kubeconfig: %s\n%s", resp.Status, body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// readKubeconfig reads the kubeconfig Run wrote: its server, a client that
// trusts its CA alone, and its token.
func readKubeconfig(t *testing.T, path string) (server string, client *http.Client, token string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var kc struct {
		Clusters []struct {
			Cluster struct {
				Server string `json:"server"`
				CA     []byte `json:"certificate-authority-data"`
			} `json:"cluster"`
		} `json:"clusters"`
		Users []struct {
			User struct {
				Token string `json:"token"`
			} `json:"user"`
		} `json:"users"`
	}
	if err := yaml.Unmarshal(b, &kc); err != nil || len(kc.Clusters) != 1 || len(kc.Users) != 1 {
		t.Fatalf("the kubeconfig %s: %v\n%s", path, err, b)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(kc.Clusters[0].Cluster.CA) {
		t.Fatalf("the kubeconfig's CA holds no certificate:\n%s", b)
	}
	client = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	return kc.Clusters[0].Cluster.Server, client, kc.Users[0].User.Token
}
