package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestRecordingsOnEveryReplica: a `kubectl exec -it` carried by replica 0,
// which records it, is listed by replica 1, naming replica 0, and replica
// 1 serves its file.
func TestRecordingsOnEveryReplica(t *testing.T) {
	ns := unique("recrep")
	admin(t, "create", "namespace", ns)
	setUpPeople(t, "team-a", "team-b")
	rs := startReplicasWith(t, 2, func(i int, env map[string]string) {
		env["TETHER_RECORDINGS_DIR"] = t.TempDir()
	}, "rec")
	a, b := "https://"+rs.addrs[0], "https://"+rs.addrs[1]
	agent(t, "rec", a, agentToken)
	within(t, 20*time.Second, "Ready on both", func() bool { return rs.allReady(t, -1, "rec") })
	root := kubeconfigFor(t, a, adminToken)
	startClock(t, root, ns)
	execOnTerminal(t, root, ns, "echo recorded-on-replica-0", "recorded-on-replica-0")

	var list struct {
		Recordings []struct {
			ID      string `json:"requestId"`
			Replica string `json:"replica"`
		} `json:"recordings"`
	}
	within(t, 10*time.Second, "replica 1 lists replica 0's recording", func() bool {
		return apiGet(t, b, adminToken, "/api/clusters/rec/recordings", &list) == http.StatusOK && len(list.Recordings) == 1
	})
	if got := list.Recordings[0].Replica; got != "hub-0" {
		t.Errorf("the recording's replica: %q, want hub-0", got)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(hubCA.CertPEM)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	req, _ := http.NewRequest("GET", b+"/api/clusters/rec/recordings/"+list.Recordings[0].ID, nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	cast, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(cast), "recorded-on-replica-0") {
		t.Errorf("the recording, fetched on replica 1: %d %q", resp.StatusCode, cast)
	}
}
