//go:build unix

package localkube

import (
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// TestNode runs this binary as a pod's container: see echoServer.
	if addr := os.Getenv(echoAddrEnv); addr != "" {
		os.Exit(echoServer(addr))
	}
	goleak.VerifyTestMain(m)
}

// wantVersion is the Kubernetes release test/kube builds.
const wantVersion = "v1.36.3"

func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Kubernetes API server (and may build it first)")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	c, err := Start(ctx, Config{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	t.Run("version", func(t *testing.T) {
		var v struct{ GitVersion string }
		if err := c.Do(ctx, "GET", "/version", nil, &v); err != nil {
			t.Fatal(err)
		}
		if v.GitVersion != wantVersion || c.Version != wantVersion {
			t.Errorf("/version says %q, Cluster.Version %q; want %q", v.GitVersion, c.Version, wantVersion)
		}
		out, err := c.RunKubectl(ctx, "version", "--client", "-o", "json")
		if err != nil {
			t.Fatal(err)
		}
		var kv struct{ ClientVersion struct{ GitVersion string } }
		if err := json.Unmarshal(out, &kv); err != nil {
			t.Fatalf("kubectl version: %v: %s", err, out)
		}
		if kv.ClientVersion.GitVersion != wantVersion {
			t.Errorf("kubectl version --client says %q, want %q", kv.ClientVersion.GitVersion, wantVersion)
		}
	})

	token := readToken(t, c)

	t.Run("service account may impersonate and nothing else", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"impersonate", "users"}, "yes"},
			{[]string{"impersonate", "groups"}, "yes"},
			{[]string{"impersonate", "serviceaccounts"}, "no"},
			{[]string{"create", "pods"}, "no"},
			{[]string{"get", "secrets"}, "no"},
			{[]string{"delete", "namespaces"}, "no"},
		} {
			args := append([]string{"--token=" + token, "auth", "can-i"}, tc.args...)
			// can-i exits 1 when the answer is no: only its output counts.
			out, _ := c.KubectlCommand(ctx, c.AdminKubeconfig, args...).Output()
			if got := strings.TrimSpace(string(out)); got != tc.want {
				t.Errorf("kubectl auth can-i %s: %q, want %q", strings.Join(tc.args, " "), got, tc.want)
			}
		}
		// `kubectl auth can-i` can't ask about user extras: it looks the
		// resource up in discovery, finds no userextras, and sends
		// "userextras.authentication.k8s.io" as a resource of the core
		// group, which is always no. So send the review it would have sent.
		for extra, want := range map[string]string{"tether-request-id": "true", "scopes": "false"} {
			review := `{"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectAccessReview","spec":{"resourceAttributes":
				{"verb":"impersonate","group":"authentication.k8s.io","resource":"userextras","subresource":"` + extra + `","name":"req-1"}}}`
			// --validate=false: validation lists CRDs, which the account may not.
			cmd := c.KubectlCommand(ctx, c.AdminKubeconfig, "--token="+token, "create", "--validate=false", "-f", "-", "-o", "jsonpath={.status.allowed}")
			cmd.Stdin = strings.NewReader(review)
			out, err := cmd.Output()
			if got := string(out); err != nil || got != want {
				t.Errorf("may impersonate userextras/%s: %q, %v; want %s", extra, got, err, want)
			}
		}
	})

	t.Run("impersonation", func(t *testing.T) {
		user, err := whoAmI(ctx, c, token, http.Header{
			"Impersonate-User":                    {"alice"},
			"Impersonate-Group":                   {"developers"},
			"Impersonate-Extra-Tether-Request-Id": {"req-1"},
		})
		if err != nil {
			t.Fatal(err)
		}
		if user.Username != "alice" || !slices.Contains(user.Groups, "developers") || strings.Join(user.Extra["tether-request-id"], ",") != "req-1" {
			t.Errorf("impersonating alice, the API server saw %+v", user)
		}
		// Any other extra is refused.
		_, err = whoAmI(ctx, c, token, http.Header{"Impersonate-User": {"alice"}, "Impersonate-Extra-Scopes": {"x"}})
		var apiErr *APIError
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusForbidden {
			t.Errorf("impersonating with another extra: %v, want 403", err)
		}
	})

	t.Run("audit log names who asked and as whom", func(t *testing.T) {
		var bySA, asAlice bool
		f, err := os.Open(c.AuditLogPath)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var ev struct {
				User             struct{ Username string }
				ImpersonatedUser *struct {
					Username string
					Extra    map[string][]string
				}
			}
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				t.Fatalf("audit log: %v: %s", err, sc.Bytes())
			}
			if ev.User.Username == c.ServiceAccountName {
				bySA = true
				if iu := ev.ImpersonatedUser; iu != nil && iu.Username == "alice" && strings.Join(iu.Extra["tether-request-id"], ",") == "req-1" {
					asAlice = true
				}
			}
		}
		if !bySA || !asAlice {
			t.Errorf("audit log: a request by %s: %v; one as alice with request id req-1: %v", c.ServiceAccountName, bySA, asAlice)
		}
	})

	t.Run("lasts as long as a tether dev may run", func(t *testing.T) {
		// A certificate or the agent's token that expired after a day
		// broke a tether dev left running overnight.
		const month = 30 * 24 * time.Hour
		block, _ := pem.Decode(c.CAPEM)
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if left := time.Until(cert.NotAfter); left < month {
			t.Errorf("the cluster's CA expires in %s", left.Round(time.Hour))
		}
		var claims struct{ Exp int64 }
		payload, err := base64.RawURLEncoding.DecodeString(strings.Split(token, ".")[1])
		if err != nil || json.Unmarshal(payload, &claims) != nil {
			t.Fatalf("the service account token's claims: %v %s", err, payload)
		}
		if left := time.Until(time.Unix(claims.Exp, 0)); left < month {
			t.Errorf("the service account token expires in %s", left.Round(time.Hour))
		}
	})

	t.Run("token rotation", func(t *testing.T) {
		newToken, err := c.RotateServiceAccountToken(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if newToken == token || readToken(t, c) != newToken {
			t.Fatal("the token file does not hold a new token")
		}
		for _, tok := range []string{token, newToken} {
			if user, err := whoAmI(ctx, c, tok, nil); err != nil || user.Username != c.ServiceAccountName {
				t.Errorf("with a token of the service account: %+v, %v", user, err)
			}
		}
	})

	// Close stops both children, removes the directory, and may be called again.
	pids := []int{c.etcd.cmd.Process.Pid, c.apiserv.cmd.Process.Pid}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		// Each child led a process group: nothing of it may be left.
		if err := syscall.Kill(-pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process group %d is still there after Close: %v", pid, err)
		}
	}
	if _, err := os.Stat(c.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s is still there after Close: %v", c.Dir, err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestStartFailsWithTheLogTail(t *testing.T) {
	if testing.Short() {
		t.Skip("runs kube-apiserver (and may build it first)")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	tmp := t.TempDir()
	_, err := Start(ctx, Config{TempDir: tmp, APIServerArgs: []string{"--no-such-flag"}})
	if !errors.Is(err, errExited) || !strings.Contains(err.Error(), "unknown flag: --no-such-flag") {
		t.Fatalf("Start with a bad flag: %v\nwant an error that the API server exited, with its last lines", err)
	}
	// The failed start cleaned up after itself.
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("left behind in %s: %v", tmp, left)
	}
}

func readToken(t *testing.T, c *Cluster) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.ServiceAccountDir, "token"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

type userInfo struct {
	Username string
	Groups   []string
	Extra    map[string][]string
}

// whoAmI asks the API server who it takes the request to be from, as
// `kubectl auth whoami` does.
func whoAmI(ctx context.Context, c *Cluster, token string, h http.Header) (userInfo, error) {
	body := `{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`
	path := "/apis/authentication.k8s.io/v1/selfsubjectreviews"
	req, err := http.NewRequestWithContext(ctx, "POST", c.URL+path, strings.NewReader(body))
	if err != nil {
		return userInfo{}, err
	}
	for k, v := range h {
		req.Header[k] = v
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.HTTPClient().Do(req)
	if err != nil {
		return userInfo{}, err
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	buf.ReadFrom(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		return userInfo{}, &APIError{Method: "POST", Path: path, StatusCode: resp.StatusCode, Message: buf.String()}
	}
	var review struct {
		Status struct{ UserInfo userInfo }
	}
	if err := json.Unmarshal(buf.Bytes(), &review); err != nil {
		return userInfo{}, err
	}
	return review.Status.UserInfo, nil
}
