package peers

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/recording"
)

// castOf writes a recording of a session on cluster by person, as the
// replica that carried it leaves it in dir.
func castOf(t *testing.T, dir, cluster, id, person string, at time.Time) {
	t.Helper()
	h := recording.Header{Version: 2, Width: 80, Height: 24, Timestamp: at.Unix(), Tether: recording.Meta{
		ID: id, Cluster: cluster, Person: person, Verb: "exec", Namespace: "default", Pod: "web", Command: []string{"sh"}, TTY: true, Time: at}}
	b, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, cluster), 0o700); err != nil {
		t.Fatal(err)
	}
	body := string(b) + "\n" + `[0.1, "o", "$ whoami\r\n` + person + `\r\n"]` + "\n"
	if err := os.WriteFile(filepath.Join(dir, cluster, id+".cast"), []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

// recordingReplicas starts hub-a and hub-b, each recording into its own
// directory, and waits for them to link.
func recordingReplicas(t *testing.T, o webOptions) (a, b *webReplica, dirs []string) {
	t.Helper()
	dirs = []string{t.TempDir(), t.TempDir()}
	o.agents = []fleet.Agent{agentEntry("eu-1"), agentEntry("ops-1", "ops")}
	o.recordings = func(i int) *recording.Store {
		s, err := recording.New(recording.Config{Dir: dirs[i]})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}
	rs := startWebReplicas(t, o, "hub-a", "hub-b")
	a, b = rs[0], rs[1]
	for _, r := range rs {
		eventually(t, 5*time.Second, r.name+" links to the other replica", func() bool { return len(r.peers.ReplicaNames()) == 1 })
	}
	return a, b, dirs
}

// listed returns the ids and replicas of a recordings listing.
func listed(t *testing.T, body string) []string {
	t.Helper()
	var out struct {
		Recordings []struct {
			ID      string `json:"requestId"`
			Replica string `json:"replica"`
		} `json:"recordings"`
	}
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		t.Fatalf("the listing %q: %v", body, err)
	}
	var ids []string
	for _, r := range out.Recordings {
		ids = append(ids, r.ID+"@"+r.Replica)
	}
	return ids
}

// TestRecordingsAcrossReplicas: a recording made on hub-a is listed and
// served on hub-b, its player page too, to its person and to the
// viewers' group; anyone else, or anyone who may not see the cluster, gets
// what they get on hub-a: nothing.
func TestRecordingsAcrossReplicas(t *testing.T) {
	a, b, dirs := recordingReplicas(t, webOptions{timeout: 5 * time.Second})
	now := time.Now().UTC().Truncate(time.Second)
	castOf(t, dirs[0], "eu-1", "req-a1", "alice", now.Add(-time.Minute))
	castOf(t, dirs[1], "eu-1", "req-b1", "alice", now)
	castOf(t, dirs[0], "eu-1", "req-a2", "carol", now.Add(-2*time.Minute))
	castOf(t, dirs[0], "ops-1", "req-ops", "olga", now)

	for _, c := range []struct {
		on          *webReplica
		user, group string
		want        []string
	}{
		{b, "alice", "dev", []string{"req-b1@", "req-a1@hub-a"}},
		{a, "alice", "dev", []string{"req-b1@hub-b", "req-a1@"}},
		{b, "carol", "dev", []string{"req-a2@hub-a"}},
		{b, "dave", "dev", nil},
		{b, "eve", "auditors", []string{"req-b1@", "req-a1@hub-a", "req-a2@hub-a"}},
	} {
		code, body, left := ask(t, c.on.public+"/api/clusters/eu-1/recordings", c.user, c.group, nil)
		if code != http.StatusOK || left != "" {
			t.Fatalf("%s's recordings on %s: %d %s, left out %q", c.user, c.on.name, code, body, left)
		}
		if got := listed(t, body); !slices.Equal(got, c.want) {
			t.Errorf("%s's recordings on %s: %q, want %q", c.user, c.on.name, got, c.want)
		}
	}

	code, cast, _ := ask(t, b.public+"/api/clusters/eu-1/recordings/req-a1", "alice", "dev", nil)
	if code != http.StatusOK || !strings.Contains(cast, `"requestId":"req-a1"`) || !strings.Contains(cast, `whoami`) {
		t.Errorf("alice's recording of hub-a, fetched on hub-b: %d %q", code, cast)
	}
	if code, cast, _ := ask(t, b.public+"/api/clusters/eu-1/recordings/req-a1", "eve", "auditors", nil); code != http.StatusOK || !strings.Contains(cast, "whoami") {
		t.Errorf("alice's recording of hub-a, fetched by an auditor on hub-b: %d %q", code, cast)
	}
	if code, page, _ := ask(t, b.public+"/cluster/eu-1/recordings/req-a1", "alice", "dev", nil); code != http.StatusOK || !strings.Contains(page, "requestId req-a1") {
		t.Errorf("the player page of hub-a's recording on hub-b: %d %q", code, page)
	}

	// Hidden alike on either replica: another person's recording, one
	// that doesn't exist, and one of a cluster they may not see.
	for _, c := range []struct{ path, user, group string }{
		{"/api/clusters/eu-1/recordings/req-a1", "carol", "dev"},
		{"/api/clusters/eu-1/recordings/req-none", "alice", "dev"},
		{"/api/clusters/ops-1/recordings/req-ops", "alice", "dev"},
		{"/cluster/eu-1/recordings/req-a1", "carol", "dev"},
	} {
		codeA, bodyA, _ := ask(t, a.public+strings.Replace(c.path, "req-a1", "req-b1", 1), c.user, c.group, nil)
		codeB, bodyB, _ := ask(t, b.public+c.path, c.user, c.group, nil)
		if codeB != http.StatusNotFound || codeA != codeB || strings.Replace(bodyA, "req-b1", "req-a1", 1) != bodyB {
			t.Errorf("%s for %s: hub-a %d %q, hub-b %d %q; want the same 404", c.path, c.user, codeA, bodyA, codeB, bodyB)
		}
	}
	if code, body, _ := ask(t, b.public+"/api/clusters/ops-1/recordings", "alice", "dev", nil); code != http.StatusNotFound {
		t.Errorf("alice's recordings of ops-1, which she may not see, on hub-b: %d %s", code, body)
	}
	if code, body, _ := ask(t, b.public+"/api/clusters/ops-1/recordings", "olga", "ops", nil); code != http.StatusOK || !slices.Equal(listed(t, body), []string{"req-ops@hub-a"}) {
		t.Errorf("olga's recordings of ops-1 on hub-b: %d %s", code, body)
	}
}

// TestRecordingsOfAReplicaThatDoesntAnswer: a replica that gives no
// listing in time is named as left out, and the others' recordings are
// listed all the same.
func TestRecordingsOfAReplicaThatDoesntAnswer(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	wrap := func(i int, h http.Handler) http.Handler {
		if i != 0 {
			return h
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.URL.Path, "/recordings") {
				select { // hub-a hangs
				case <-r.Context().Done():
				case <-release:
				}
				return
			}
			h.ServeHTTP(w, r)
		})
	}
	_, b, dirs := recordingReplicas(t, webOptions{timeout: 300 * time.Millisecond, wrap: wrap})
	castOf(t, dirs[1], "eu-1", "req-b1", "alice", time.Now().UTC())
	code, body, left := ask(t, b.public+"/api/clusters/eu-1/recordings", "alice", "dev", nil)
	if code != http.StatusOK || !slices.Equal(listed(t, body), []string{"req-b1@"}) {
		t.Fatalf("alice's recordings on hub-b: %d %s", code, body)
	}
	if !strings.Contains(left, "replica hub-a (it didn't answer") || !strings.Contains(body, fmt.Sprintf("%q", "leftOut")) {
		t.Errorf("hub-a, which didn't answer, left out: header %q, body %s", left, body)
	}
}
