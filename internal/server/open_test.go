package server

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/kubeproxy"
	"github.com/tetherhq/tether/internal/listfile"
	"github.com/tetherhq/tether/internal/testutil/fakecluster"
	"github.com/tetherhq/tether/internal/testutil/syncbuf"
	"github.com/tetherhq/tether/internal/web"
)

// limitsHub starts a hub whose users list is a file, with the cluster
// "open" (groups dev and ops) and an agent for it whose API server is fc.
func limitsHub(t *testing.T, fc *fakecluster.Cluster, users string, mods ...func(*Config, *auth.Config)) (*testHub, *syncbuf.Buffer, string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "users.yaml")
	if err := os.WriteFile(file, []byte(users), 0o600); err != nil {
		t.Fatal(err)
	}
	acfg := auth.Config{UsersFile: file, Debounce: 10 * time.Millisecond, PollInterval: 50 * time.Millisecond}
	cfg := Config{
		Agents: fleet.New([]fleet.Agent{{Name: "open", TokenHashes: []listfile.Hash{listfile.HashToken(testToken)}, Groups: fleet.Groups{Names: []string{"dev", "ops"}}}}),
		Audit:  &syncbuf.Buffer{}, PublicURL: "https://hub.example.com", ProbeInterval: time.Hour,
	}
	for _, m := range mods {
		m(&cfg, &acfg)
	}
	people, err := auth.New(acfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { people.Close() })
	cfg.Auth = people
	h := startHub(t, cfg)
	a := startAgent(t, h.url, "open", fc)
	eventually(t, 5*time.Second, "open connects", func() bool { return a.Connected() && h.connected("open") != nil })
	return h, cfg.Audit.(*syncbuf.Buffer), file
}

// watchAs opens a watch on "open" as token and returns its answer.
func watchAs(t *testing.T, h *testHub, token string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "GET", h.url+"/clusters/open/watch?watch=1", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// TestWatchesPastTheBound: one person's watches past
// TETHER_MAX_WATCHES_PER_PERSON get 429 with Retry-After and a Status that
// names the setting, counted and audited; another person's don't, and a
// watch that ends frees its place.
func TestWatchesPastTheBound(t *testing.T) {
	fc := fakecluster.New(t)
	h, audit, _ := limitsHub(t, fc, testUsers, func(c *Config, _ *auth.Config) { c.Limits = auth.Limits{Watches: 3} })
	var open []*http.Response
	for i := range 3 {
		resp := watchAs(t, h, aliceToken)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("watch %d: %s", i+1, resp.Status)
		}
		open = append(open, resp)
	}
	over := watchAs(t, h, aliceToken)
	if over.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("the 4th watch: %s, want 429", over.Status)
	}
	body, _ := io.ReadAll(over.Body)
	if over.Header.Get("Retry-After") == "" ||
		!strings.Contains(string(body), `"reason":"TooManyRequests"`) || !strings.Contains(string(body), kubeproxy.SettingMaxWatches) ||
		!strings.Contains(string(body), "at most 3 watches") {
		t.Fatalf("the 4th watch: %s, Retry-After %q\n%s", over.Status, over.Header.Get("Retry-After"), body)
	}
	if got := h.value("tether_person_limit_refusals_total", "open", "watches"); got != 1 {
		t.Errorf("tether_person_limit_refusals_total{limit=watches} = %v, want 1", got)
	}
	eventually(t, 5*time.Second, "the 429's audit line", func() bool {
		return strings.Contains(audit.String(), `"person":"alice"`) && strings.Contains(audit.String(), `"status":429`)
	})
	// A plain GET is another bound.
	if code, body, _ := call(t, "GET", h.url+"/clusters/open/api/v1/pods", aliceToken, nil); code != http.StatusOK {
		t.Errorf("a GET beside 3 watches: %d %s", code, body)
	}
	if resp := watchAs(t, h, bobToken); resp.StatusCode != http.StatusOK {
		t.Errorf("bob's watch beside alice's 3: %s", resp.Status)
	}
	open[0].Body.Close()
	eventually(t, 5*time.Second, "a place freed", func() bool {
		return h.watches("open", "alice") == 2
	})
	if resp := watchAs(t, h, aliceToken); resp.StatusCode != http.StatusOK {
		t.Errorf("a watch after one ended: %s", resp.Status)
	}
}

// TestUsersListLimitsLiftTheBound: a users list entry's limits raise the
// hub's bound for that person alone (Argo CD's many watches).
func TestUsersListLimitsLiftTheBound(t *testing.T) {
	fc := fakecluster.New(t)
	users := strings.Replace(testUsers, "  groups: [dev]\n", "  groups: [dev]\n  limits: {watches: 5, sessions: 1}\n", 1)
	h, _, _ := limitsHub(t, fc, users, func(c *Config, _ *auth.Config) { c.Limits = auth.Limits{Watches: 2} })
	for i := range 5 {
		if resp := watchAs(t, h, aliceToken); resp.StatusCode != http.StatusOK {
			t.Fatalf("alice's watch %d of her 5: %s", i+1, resp.Status)
		}
	}
	if resp := watchAs(t, h, aliceToken); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("alice's 6th watch: %s, want 429", resp.Status)
	}
	for i := range 2 {
		if resp := watchAs(t, h, bobToken); resp.StatusCode != http.StatusOK {
			t.Fatalf("bob's watch %d: %s", i+1, resp.Status)
		}
	}
	if resp := watchAs(t, h, bobToken); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("bob's 3rd watch: %s, want 429: alice's limits are hers", resp.Status)
	}
}

// sessionAs upgrades a connection to "open" as token, as kubectl exec
// does, and checks that it echoes.
func sessionAs(t *testing.T, h *testHub, token string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	io.WriteString(c, "GET /clusters/open/echo-upgrade HTTP/1.1\r\nHost: hub\r\nAuthorization: Bearer "+token+
		"\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("exec: status %d, want 101", resp.StatusCode)
	}
	io.WriteString(c, "ping")
	got := make([]byte, 4)
	if _, err := io.ReadFull(br, got); err != nil || string(got) != "ping" {
		t.Fatalf("exec echoed %q, %v", got, err)
	}
	return c, br
}

// TestRevokedSessionsEnd: taking alice off the users list ends her open
// exec-like session and her watch within 5 s, each audited as revoked;
// bob's go on.
func TestRevokedSessionsEnd(t *testing.T) {
	fc := fakecluster.New(t)
	h, audit, file := limitsHub(t, fc, testUsers)
	_, execOut := sessionAs(t, h, aliceToken)
	watch := watchAs(t, h, aliceToken)
	if watch.StatusCode != http.StatusOK {
		t.Fatalf("watch: %s", watch.Status)
	}
	bobExec, bobOut := sessionAs(t, h, bobToken)
	execEnded := ending(func() error { _, err := execOut.ReadByte(); return err })
	watchEnded := ending(func() error { _, err := io.Copy(io.Discard, watch.Body); return err })

	bobOnly := testUsers[strings.Index(testUsers, "- name: bob"):]
	if err := os.WriteFile(file, []byte(bobOnly), 0o600); err != nil {
		t.Fatal(err)
	}
	endsWithin(t, execEnded, 5*time.Second, "alice's exec")
	endsWithin(t, watchEnded, 5*time.Second, "alice's watch")
	eventually(t, 5*time.Second, "two audit lines ended revoked", func() bool {
		return strings.Count(audit.String(), `"ended":"revoked"`) == 2
	})
	for line := range strings.Lines(audit.String()) {
		if strings.Contains(line, `"ended"`) && !strings.Contains(line, `"person":"alice"`) {
			t.Errorf("a line ended that isn't alice's: %s", line)
		}
	}
	io.WriteString(bobExec, "pong")
	got := make([]byte, 4)
	if _, err := io.ReadFull(bobOut, got); err != nil || string(got) != "pong" {
		t.Errorf("bob's exec after alice left: %q, %v", got, err)
	}
}

// TestWatchEndsWhenTheClusterNoLongerAdmits: a new agents list whose groups
// for the cluster no longer include alice's ends her watch, not bob's.
func TestWatchEndsWhenTheClusterNoLongerAdmits(t *testing.T) {
	fc := fakecluster.New(t)
	h, audit, _ := limitsHub(t, fc, testUsers)
	alice, bob := watchAs(t, h, aliceToken), watchAs(t, h, bobToken)
	if alice.StatusCode != http.StatusOK || bob.StatusCode != http.StatusOK {
		t.Fatalf("watches: %s, %s", alice.Status, bob.Status)
	}
	aliceEnded := ending(func() error { _, err := io.Copy(io.Discard, alice.Body); return err })
	bobEnded := ending(func() error { _, err := io.Copy(io.Discard, bob.Body); return err })
	entry, _ := h.cfg.Agents.Lookup("open")
	entry.Groups = fleet.Groups{Names: []string{"ops"}}
	h.AgentsChanged(h.cfg.Agents.Replace([]fleet.Agent{entry}))
	endsWithin(t, aliceEnded, 5*time.Second, "alice's watch")
	eventually(t, 5*time.Second, "alice's audit line", func() bool {
		return strings.Contains(audit.String(), `"ended":"revoked"`)
	})
	select {
	case err := <-bobEnded:
		t.Fatalf("bob's watch ended too: %v", err)
	default:
	}
}

// TestWatchEndsAtExpiry: a watch made with a hub-issued token ends when
// the token expires, audited as expired.
func TestWatchEndsAtExpiry(t *testing.T) {
	fc := fakecluster.New(t)
	const ttl, left = time.Minute, 1500 * time.Millisecond
	// The hub signs as if it were ttl-left ago: its token, good for a
	// minute, has left to go.
	h, audit, _ := limitsHub(t, fc, testUsers, func(_ *Config, a *auth.Config) {
		a.TTL = ttl
		a.Now = func() time.Time { return time.Now().Add(left - ttl) }
	})
	p, ok, err := h.cfg.Auth.Authenticate(&http.Request{Header: http.Header{"Authorization": {"Bearer " + aliceToken}}})
	if !ok || err != nil {
		t.Fatal(ok, err)
	}
	token, _, err := h.cfg.Auth.IssueToken(p)
	if err != nil {
		t.Fatal(err)
	}
	watch := watchAs(t, h, token)
	if watch.StatusCode != http.StatusOK {
		t.Fatalf("watch: %s", watch.Status)
	}
	ended := ending(func() error { _, err := io.Copy(io.Discard, watch.Body); return err })
	endsWithin(t, ended, left+5*time.Second, "the watch of an expired token")
	eventually(t, 5*time.Second, "its audit line", func() bool {
		return strings.Contains(audit.String(), `"ended":"expired"`)
	})
}

// TestSignOutEndsEventStreamsAtOnce: signing out ends the page's event
// streams then, not at their next keep-alive (an hour here).
func TestSignOutEndsEventStreamsAtOnce(t *testing.T) {
	fc := fakecluster.New(t)
	h, _, _ := limitsHub(t, fc, testUsers, func(c *Config, _ *auth.Config) { c.EventsKeepAlive = time.Hour; c.PublicURL = selfURL })
	session := signIn(t, h, aliceToken)
	cookie := http.Header{"Cookie": {web.SessionCookie + "=" + session}, "Origin": {h.url}}
	req, _ := http.NewRequestWithContext(t.Context(), "GET", h.url+"/api/events", nil)
	req.Header = cookie.Clone()
	events, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer events.Body.Close()
	first, err := bufio.NewReader(events.Body).ReadString('\n')
	if events.StatusCode != http.StatusOK || err != nil {
		t.Fatalf("events: %s, %q, %v", events.Status, first, err)
	}
	ended := ending(func() error { _, err := io.Copy(io.Discard, events.Body); return err })
	if code, _, _ := call(t, "POST", h.url+"/logout", "", cookie); code != http.StatusSeeOther {
		t.Fatalf("sign-out: %d, want 303", code)
	}
	endsWithin(t, ended, 5*time.Second, "the event stream after sign-out")
}

// signIn signs in at the page with token and returns the session cookie's
// value.
func signIn(t *testing.T, h *testHub, token string) string {
	t.Helper()
	login, _ := http.NewRequestWithContext(context.Background(), "POST", h.url+"/login", strings.NewReader("token="+token))
	login.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	login.Header.Set("Origin", h.url)
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Do(login)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, c := range resp.Cookies() {
		if c.Name == web.SessionCookie {
			return c.Value
		}
	}
	t.Fatalf("sign-in: %d, no session cookie", resp.StatusCode)
	return ""
}

// TestUsersListChangesEndWatches: a reload ends alice's watch when it
// drops her, replaces her token, or changes her groups (the cluster would
// see another identity now), and leaves it open when it changes only
// someone else.
func TestUsersListChangesEndWatches(t *testing.T) {
	bob := testUsers[strings.Index(testUsers, "- name: bob"):]
	for _, tc := range []struct {
		name, users string
		ends        bool
	}{
		{"dropped", bob, true},
		{"token replaced", "- name: alice\n  token: alice-new-token-0123456789abcdef012345\n  groups: [dev]\n" + bob, true},
		{"groups changed", "- name: alice\n  token: " + aliceToken + "\n  groups: [dev, ops]\n" + bob, true},
		{"someone else changed", "- name: alice\n  token: " + aliceToken + "\n  groups: [dev]\n- name: bob\n  token: " + bobToken + "\n  groups: [dev]\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fc := fakecluster.New(t)
			h, audit, file := limitsHub(t, fc, testUsers)
			watch := watchAs(t, h, aliceToken)
			if watch.StatusCode != http.StatusOK {
				t.Fatalf("watch: %s", watch.Status)
			}
			ended := ending(func() error { _, err := io.Copy(io.Discard, watch.Body); return err })
			if err := os.WriteFile(file, []byte(tc.users), 0o600); err != nil {
				t.Fatal(err)
			}
			if tc.ends {
				endsWithin(t, ended, 5*time.Second, "alice's watch")
				eventually(t, 5*time.Second, "the audit line", func() bool { return strings.Contains(audit.String(), `"ended":"revoked"`) })
				return
			}
			eventually(t, 5*time.Second, "the reload", func() bool {
				p, ok, _ := h.cfg.Auth.Authenticate(&http.Request{Header: http.Header{"Authorization": {"Bearer " + bobToken}}})
				return ok && len(p.Groups) == 1 && p.Groups[0] == "dev"
			})
			// A second reload, seen in force, follows the first one's
			// recheck: the users file's reloads and their hooks run one
			// after another.
			const carol = "- name: carol\n  token: carol-token-0123456789abcdef0123456789\n"
			if err := os.WriteFile(file, []byte(tc.users+carol), 0o600); err != nil {
				t.Fatal(err)
			}
			eventually(t, 5*time.Second, "the second reload", func() bool {
				_, ok, _ := h.cfg.Auth.Authenticate(&http.Request{Header: http.Header{"Authorization": {"Bearer carol-token-0123456789abcdef0123456789"}}})
				return ok
			})
			select {
			case err := <-ended:
				t.Fatalf("alice's watch ended when only bob changed: %v", err)
			default:
			}
			if h.watches("open", "alice") != 1 {
				t.Fatal("alice's watch is no longer counted")
			}
		})
	}
}
