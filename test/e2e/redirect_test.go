package e2e

import (
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/tetherhq/tether/internal/testutil/recordingapi"
)

// TestRedirectsStayOnTheCluster: kubectl, through the real hub, gets
// redirects from an API server that answers what it is told (the recording
// one), behind a real agent and reached by the hub itself. Those leading
// to another host become errors, and that host gets no request and never
// the person's hub-issued token; those within the cluster are followed,
// through the hub (issue 33). The real API server proxies to no pod here
// (their address is 127.0.0.1, which it refuses), so it can't stand in.
func TestRedirectsStayOnTheCluster(t *testing.T) {
	other := recordingapi.Start(t, recordingapi.Config{Plain: true})

	// What a pod behind a service proxy, an aggregated API or a hostile
	// API server may answer.
	rec := recordingapi.Start(t, recordingapi.Config{})
	const svc = "/api/v1/namespaces/x/services/s:80/proxy/"
	rec.Answer("/version", recordingapi.Reply(200, http.Header{"Content-Type": {"application/json"}}, `{"gitVersion":"v1.36.3-recording"}`))
	rec.Answer(svc+"away", recordingapi.Redirect(http.StatusTemporaryRedirect, other.URL+"/collect"))
	rec.Answer(svc+"relative", recordingapi.Redirect(http.StatusFound, "back"))
	rec.Answer(svc+"own", recordingapi.Redirect(http.StatusFound, "https://kubernetes.default.svc"+svc+"back"))
	rec.Answer(svc+"direct", recordingapi.Redirect(http.StatusFound, rec.URL+svc+"back"))
	rec.Answer(svc+"back", recordingapi.Reply(200, nil, "back home\n"))
	dir := t.TempDir()
	if err := rec.WriteServiceAccount(dir, "recorded-service-account-token"); err != nil {
		t.Fatal(err)
	}
	clusters := "- name: direct\n  server: " + rec.URL + "\n  caFile: " + filepath.Join(dir, "ca.crt") + "\n  tokenFile: " + filepath.Join(dir, "token") + "\n"

	h, hubURL := hub(t, map[string]string{"TETHER_FLEET_CLUSTERS": clusters}, "recorded")
	env := agentEnv(t, "recorded", hubURL, agentToken, dir)
	env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"], _ = net.SplitHostPort(rec.Addr)
	b := start(t, "agent recorded", env, "agent")
	b.waitFor(t, 10*time.Second, `Connected to `+hubURL+` as "recorded"`)
	h.waitFor(t, 10*time.Second, `The agent of "direct" connected`)
	kc := kubeconfigFor(t, hubURL, adminToken)
	token := kubeconfigToken(t, kc)

	away := `answered with a redirect to "` + other.URL + `", away from the cluster`
	for _, c := range []struct {
		context, path string
		want          string // in kubectl's output
		ok            bool
	}{
		{"recorded", svc + "away", away, false},
		{"recorded", svc + "relative", "back home", true},
		{"recorded", svc + "own", "back home", true},
		{"direct", svc + "away", away, false},
		{"direct", svc + "relative", "back home", true},
		{"direct", svc + "direct", "back home", true},
	} {
		out, err := kubectl(t, kc, "--context", contextOf(hubURL, c.context), "get", "--raw", c.path)
		if (err == nil) != c.ok || !strings.Contains(out, c.want) {
			t.Errorf("kubectl --context %s get --raw %s: %v\n%s\nwant %q", c.context, c.path, err, out, c.want)
		}
	}
	if got := other.Requests(); len(got) != 0 || other.Saw(token) || other.Saw(adminToken) {
		t.Errorf("the other host got %d requests; the hub-issued token among them: %v", len(got), other.Saw(token))
	}
	if rec.Saw(token) || rec.Saw(adminToken) {
		t.Error("the recording API server got the person's token")
	}

	// A client that escapes the cluster's name keeps its escaping of the
	// rest: a%2Fb is one segment (issue 33). Not kubectl: its --raw
	// decodes the path itself.
	const escaped = "/api/v1/namespaces/x/services/a%2Fb:80/proxy/"
	if code, body := hubGet(t, hubURL+"/clusters/dir%65ct"+escaped, token); code != 200 || !strings.Contains(body, `"path":"`+escaped+`"`) {
		t.Errorf("GET /clusters/dir%%65ct%s: %d %s", escaped, code, body)
	}

	// The audit says where the refused redirects pointed.
	var refused []string
	for line := range strings.SplitSeq(h.out.String(), "\n") {
		var al struct {
			Cluster, Path, Location string
			Status                  int
		}
		if json.Unmarshal([]byte(line), &al) != nil {
			continue
		}
		if al.Status == http.StatusBadGateway {
			refused = append(refused, al.Cluster+" "+al.Location)
		}
	}
	if want := []string{"recorded " + other.URL + "/collect", "direct " + other.URL + "/collect"}; strings.Join(refused, ",") != strings.Join(want, ",") {
		t.Errorf("the audit has 502s for %q, want %q", refused, want)
	}
	if !strings.Contains(h.out.String(), `A cluster answered a request with a redirect away from it; Tether answered 502 instead (the audit line's location says where to) cluster="recorded"`) {
		t.Error("the hub's log doesn't say that it refused a redirect")
	}
}

// kubeconfigToken returns the token of the kubeconfig in file.
func kubeconfigToken(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var kc struct {
		Users []struct {
			User struct{ Token string }
		}
	}
	if err := yaml.Unmarshal(b, &kc); err != nil || len(kc.Users) == 0 || kc.Users[0].User.Token == "" {
		t.Fatalf("no token in the kubeconfig: %v", err)
	}
	return kc.Users[0].User.Token
}
