package server

import (
	"bufio"
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/hub"
	"github.com/tetherhq/tether/internal/testutil/fakecluster"
	"github.com/tetherhq/tether/internal/testutil/files"
	"github.com/tetherhq/tether/internal/web"

	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/listfile"
)

// listFileHub starts a hub, with the people of testUsers, whose agents list
// is a file it watches as TETHER_FLEET_AGENTS_FILE makes it do. write puts
// a new list in the file the way a Secret's file changes: whole, at once.
func listFileHub(t *testing.T, list string, mods ...func(*Config)) (h *testHub, write func(list string)) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "agents.yaml")
	write = func(list string) { files.Replace(t, path, list) }
	write(list)
	agents, err := fleet.Load(fleet.Config{
		AgentsFile:   path,
		Debounce:     10 * time.Millisecond,
		PollInterval: -1, // events alone, as the hub gets them from the kernel
		OnChange:     func(c fleet.Change) { h.AgentsChanged(c) },
	})
	if err != nil {
		t.Fatal(err)
	}
	people, err := auth.New(auth.Config{Users: testUsers})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { people.Close() })
	cfg := Config{Agents: agents, Auth: people, PublicURL: "https://hub.example.com"}
	for _, m := range mods {
		m(&cfg)
	}
	h = startHub(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- agents.Watch(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch: %v", err)
		}
	})
	return h, write
}

// listEntry is one entry of an agents list with testToken.
func listEntry(name, rest string) string {
	return "- {name: " + name + ", token: " + testToken + rest + "}\n"
}

// sseEvent is one Server-Sent Event.
type sseEvent struct{ kind, data string }

// eventStream is /api/events as one person reads it, with what it has
// shown them so far.
type eventStream struct {
	t      *testing.T
	who    string
	events <-chan sseEvent
	shown  map[string]map[string]string // cluster name → labels, as the events left it
	last   map[string]web.ClusterJSON   // cluster name → its last event
	heard  map[string]bool              // every name any event named
	log    []string                     // every event, for failure messages
}

// openEvents opens /api/events as the person with token; the stream ends
// with the test.
func openEvents(t *testing.T, url, who, token string) *eventStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", url+"/api/events", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		cancel()
		resp.Body.Close()
		t.Fatalf("/api/events as %s: %s", who, resp.Status)
	}
	events := make(chan sseEvent, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(events)
		sc := bufio.NewScanner(resp.Body)
		var e sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				e.kind = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				e.data = strings.TrimPrefix(line, "data: ")
			case line == "" && e.kind != "":
				select {
				case events <- e:
				case <-ctx.Done():
					return
				}
				e = sseEvent{}
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		resp.Body.Close()
		<-done
	})
	return &eventStream{t: t, who: who, events: events, shown: map[string]map[string]string{}, last: map[string]web.ClusterJSON{}, heard: map[string]bool{}}
}

// apply takes one event into what the stream has shown.
func (s *eventStream) apply(e sseEvent) {
	s.t.Helper()
	s.log = append(s.log, e.kind+" "+e.data)
	switch e.kind {
	case "cluster":
		var c web.ClusterJSON
		if err := json.Unmarshal([]byte(e.data), &c); err != nil || c.Name == "" {
			s.t.Fatalf("%s got a cluster event %q: %v", s.who, e.data, err)
		}
		s.shown[c.Name] = c.Labels
		s.last[c.Name] = c
		s.heard[c.Name] = true
	case "removed":
		var r web.RemovedJSON
		if err := json.Unmarshal([]byte(e.data), &r); err != nil || r.Name == "" {
			s.t.Fatalf("%s got a removed event %q: %v", s.who, e.data, err)
		}
		if _, ok := s.shown[r.Name]; !ok {
			s.t.Errorf("%s was told %q was removed, which the stream never showed", s.who, r.Name)
		}
		delete(s.shown, r.Name)
		delete(s.last, r.Name)
		s.heard[r.Name] = true
	default:
		s.t.Fatalf("%s got an event of an unknown kind: %q %q", s.who, e.kind, e.data)
	}
}

// until reads events until cond holds of what the stream has shown.
func (s *eventStream) until(what string, cond func() bool) {
	s.t.Helper()
	deadline := time.NewTimer(5 * time.Second)
	defer deadline.Stop()
	for !cond() {
		select {
		case e, ok := <-s.events:
			if !ok {
				s.t.Fatalf("%s's stream ended before %s; its events:\n%s", s.who, what, strings.Join(s.log, "\n"))
			}
			s.apply(e)
		case <-deadline.C:
			s.t.Fatalf("%s: not within 5 s: %s; its events:\n%s", s.who, what, strings.Join(s.log, "\n"))
		}
	}
}

// names lists the clusters the stream shows now.
func (s *eventStream) names() string { return strings.Join(slices.Sorted(maps.Keys(s.shown)), ",") }

// TestListReloadReachesEventStreams changes the agents list file under a
// running hub and follows two people's /api/events: each learns of the
// clusters added, changed and removed that they may see, a cluster whose
// groups leave someone out is removed from their stream, and nobody hears
// of a cluster they never could see, even when its agent is disconnected.
func TestListReloadReachesEventStreams(t *testing.T) {
	// alice is in dev, bob in ops (testUsers).
	h, write := listFileHub(t,
		listEntry("a", ", labels: {env: dev}")+
			listEntry("b", "")+
			listEntry("c", ", groups: [ops]"))
	fc := fakecluster.New(t)
	agentC := startAgent(t, h.url, "c", fc)
	eventually(t, 5*time.Second, "c is Ready", func() bool { return statusOf(h, "c") == hub.Ready })

	alice := openEvents(t, h.url, "alice", aliceToken)
	bob := openEvents(t, h.url, "bob", bobToken)
	alice.until("alice sees a and b", func() bool { return alice.names() == "a,b" })
	bob.until("bob sees a, b and c", func() bool { return bob.names() == "a,b,c" })

	// a's labels change, b becomes ops' alone, c leaves the list, d comes
	// for dev alone.
	write(listEntry("a", ", labels: {env: prod}") +
		listEntry("b", ", groups: [ops]") +
		listEntry("d", ", groups: [dev], labels: {team: web}"))
	alice.until("alice sees a (env=prod) and d, and b is gone", func() bool {
		return alice.names() == "a,d" && alice.shown["a"]["env"] == "prod"
	})
	bob.until("bob sees a (env=prod) and b, and c is gone", func() bool {
		return bob.names() == "a,b" && bob.shown["a"]["env"] == "prod"
	})
	if got := alice.shown["d"]["team"]; got != "web" {
		t.Errorf("d's labels as alice got them: %v", alice.shown["d"])
	}
	// c's agent is sent away and refused, after c left the list; the hub
	// then forgets c's status altogether.
	if err := agentC.Wait(t, 5*time.Second); err == nil || !strings.Contains(err.Error(), "it doesn't know this name and token.") {
		t.Fatalf("c's agent: Run = %v, want a refusal once the list dropped it", err)
	}
	eventually(t, 5*time.Second, "c's agent gone and its status forgotten", func() bool {
		return h.connected("c") == nil && len(h.History("c")) == 0
	})

	// One more change everyone sees: whatever the streams were to say of
	// the reload above, they have said before this.
	write(listEntry("a", ", labels: {env: prod, step: \"3\"}") +
		listEntry("b", ", groups: [ops]") +
		listEntry("d", ", groups: [dev], labels: {team: web}"))
	alice.until("alice sees a's step=3", func() bool { return alice.shown["a"]["step"] == "3" })
	bob.until("bob sees a's step=3", func() bool { return bob.shown["a"]["step"] == "3" })
	if alice.names() != "a,d" || alice.heard["c"] {
		t.Errorf("alice's stream shows %s, and heard of c: %v; its events:\n%s", alice.names(), alice.heard["c"], strings.Join(alice.log, "\n"))
	}
	if bob.names() != "a,b" || bob.heard["d"] {
		t.Errorf("bob's stream shows %s, and heard of d: %v; its events:\n%s", bob.names(), bob.heard["d"], strings.Join(bob.log, "\n"))
	}

	// b is everyone's again: alice gets it back.
	write(listEntry("a", ", labels: {env: prod, step: \"3\"}") +
		listEntry("b", "") +
		listEntry("d", ", groups: [dev], labels: {team: web}"))
	alice.until("alice sees b again", func() bool { return alice.names() == "a,b,d" })
}

// TestEventStreamCatchingUpRemovesWhatIsGone covers a stream that fell
// behind and is told to send everything again: it sends a removal for each
// cluster it showed that the person may no longer see.
func TestEventStreamCatchingUpRemovesWhatIsGone(t *testing.T) {
	people, err := auth.New(auth.Config{Users: testUsers})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { people.Close() })
	hash := []listfile.Hash{listfile.HashToken(testToken)}
	everyone := fleet.Groups{Everyone: true}
	list := fleet.New([]fleet.Agent{{Name: "a", TokenHashes: hash, Groups: everyone}, {Name: "b", TokenHashes: hash, Groups: everyone}})
	h := startHub(t, Config{Agents: list, Auth: people, PublicURL: "https://hub.example.com"})
	alice := openEvents(t, h.url, "alice", aliceToken)
	alice.until("alice sees a and b", func() bool { return alice.names() == "a,b" })

	// The list changes without a word to the streams, and then they are
	// told to send everything, as when more changed than a stream keeps.
	list.Replace([]fleet.Agent{{Name: "a", TokenHashes: hash, Groups: fleet.Groups{Names: []string{"ops"}}}, {Name: "c", TokenHashes: hash, Groups: everyone}})
	h.registry.ChangedAll()
	alice.until("alice sees c alone", func() bool { return alice.names() == "c" })
}
