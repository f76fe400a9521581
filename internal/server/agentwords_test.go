package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"

	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/protocol"
	"github.com/tetherhq/tether/internal/testutil/fakecluster"
)

// TestAgentWordsAreClippedAndNamed: an agent (its token is all it takes)
// answers every dial with nearly a megabyte of text, escape sequences, line
// breaks and bidi characters in it. Everyone who sees the cluster reads
// it, as its status on the page, the API and the event stream, and in
// kubectl's 503: they get a few hundred characters, without control
// characters, said to be the agent's (issue 33).
func TestAgentWordsAreClippedAndNamed(t *testing.T) {
	fc := fakecluster.New(t)
	people, err := auth.New(auth.Config{Users: testUsers})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { people.Close() })
	h := startHub(t, Config{Agents: testAgents("eu-1"), Auth: people})
	sess := rawAgent(t, h)
	ctl, err := sess.Open(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := protocol.Write(ctl, goodHello(fc)); err != nil {
		t.Fatal(err)
	}
	if m, err := protocol.Read(ctl); err != nil || m.Type != protocol.TypeWelcome {
		t.Fatalf("hello answered %+v, %v", m, err)
	}
	words := "\x1b[2J\x1b[31mALL CLUSTERS COMPROMISED\r\nUnreachable: call +1 555 0100\u202e\u200b" + strings.Repeat("x", 900<<10)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // answers dials until the session ends
		defer wg.Done()
		for {
			st, err := sess.Accept(context.Background())
			if err != nil {
				return
			}
			protocol.Write(st, protocol.Message{Type: protocol.TypeDial, Error: words})
			st.Close()
		}
	}()
	t.Cleanup(func() { sess.Close(); wg.Wait() })

	check := func(where, text string) {
		t.Helper()
		if len(text) > 1024 || !strings.Contains(text, `the agent says: "`) || !strings.Contains(text, "ALL CLUSTERS COMPROMISED") ||
			strings.ContainsFunc(text, func(r rune) bool { return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) }) {
			t.Errorf("%s: %d bytes: %.300q", where, len(text), text)
		}
	}
	eventually(t, 5*time.Second, "the agent's words in the status", func() bool { return strings.Contains(statusOf(h, "eu-1"), "COMPROMISED") })
	st, _ := h.Cluster("eu-1")
	check("status", st.Message)
	t.Logf("the status: %q", st.String())

	code, body, _ := call(t, "GET", h.url+"/api/clusters/eu-1", aliceToken, nil)
	var got struct{ Status, Message string }
	if err := json.Unmarshal([]byte(body), &got); code != http.StatusOK || err != nil {
		t.Fatalf("the API: %d %.200s", code, body)
	}
	check("the API", got.Message)

	code, body, _ = call(t, "GET", h.url+"/clusters/eu-1/api", aliceToken, nil)
	var status struct{ Message string }
	if err := json.Unmarshal([]byte(body), &status); code != http.StatusServiceUnavailable || err != nil {
		t.Fatalf("kubectl's answer: %d %.200s", code, body)
	}
	check("kubectl's 503", status.Message)
	t.Logf("kubectl's 503: %q", status.Message)
}
