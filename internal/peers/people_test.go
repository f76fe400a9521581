package peers

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/hub"
	"github.com/tetherhq/tether/internal/kubeproxy"
	"github.com/tetherhq/tether/internal/logging"
	"github.com/tetherhq/tether/internal/testutil/files"
	"github.com/tetherhq/tether/internal/testutil/syncbuf"
)

const (
	tokAlice = "alice-token-0123456789abcdef0123456789"
	tokBob   = "bob-token-0123456789abcdef0123456789ab"
)

var (
	aliceAndBob = "- name: alice\n  token: " + tokAlice + "\n- name: bob\n  token: " + tokBob + "\n"
	aliceOnly   = "- name: alice\n  token: " + tokAlice + "\n"
)

// peopleReplica is a replica with people's side: its own users file, the
// shared signing key, and a kubeproxy holding what people keep open.
type peopleReplica struct {
	name    string
	auth    *auth.Authenticator
	proxy   *kubeproxy.Proxy
	peers   *Peers
	peer    *http.Server
	logs    *syncbuf.Buffer
	users   string       // its users file
	changed atomic.Int32 // OnUsersChanged calls
}

// usersFile is what a replica's users file holds at start, and since when.
type usersFile struct {
	name, content string
	mtime         time.Time
}

// startPeople starts replicas as startReplicas does, each with its own
// users file, as each pod has its own Secret volume.
func startPeople(t *testing.T, specs ...usersFile) []*peopleReplica {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKCS8PrivateKey(priv)
	key := filepath.Join(t.TempDir(), "signing-key.pem")
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	f := &fleetOfReplicas{addrs: map[string]string{}, certs: map[string]tls.Certificate{}}
	for _, s := range specs {
		f.certs[s.name] = selfSigned(t, s.name)
	}
	var rs []*peopleReplica
	var changes []chan struct{}
	for _, s := range specs {
		r := &peopleReplica{name: s.name, logs: &syncbuf.Buffer{}, users: filepath.Join(t.TempDir(), "users.yaml")}
		log := slog.New(logging.NewTextHandler(r.logs, slog.LevelDebug))
		files.Replace(t, r.users, s.content)
		if err := os.Chtimes(r.users, s.mtime, s.mtime); err != nil {
			t.Fatal(err)
		}
		r.auth, err = auth.New(auth.Config{UsersFile: r.users, SigningKeyFile: key, TTL: time.Hour, Logger: log,
			Debounce: 10 * time.Millisecond, PollInterval: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		r.auth.OnUsersChanged(func() { r.changed.Add(1) })
		h, err := hub.New(hub.Config{Logger: log, Agents: testAgents("eu-1"), Replica: s.name})
		if err != nil {
			t.Fatal(err)
		}
		r.proxy, err = kubeproxy.New(kubeproxy.Config{Logger: log, Clusters: h, Auth: r.auth})
		if err != nil {
			t.Fatal(err)
		}
		ch := make(chan struct{}, 1)
		changes = append(changes, ch)
		r.peers = New(Config{Logger: log, Hub: h, Members: &members{self: s.name, all: f, change: ch}, Ping: 200 * time.Millisecond,
			People: PeopleConfig{Auth: r.auth, SignedOut: r.proxy.SignedOut}})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		r.peer = r.peers.Server(r.peers.Handler())
		go r.peer.ServeTLS(ln, "", "")
		f.mu.Lock()
		f.addrs[s.name] = ln.Addr().String()
		f.mu.Unlock()
		rs = append(rs, r)
		t.Cleanup(func() {
			r.peer.Close()
			r.peers.Close()
			r.proxy.Close()
			r.auth.Close()
			h.Close()
			if t.Failed() {
				t.Logf("log of replica %s:\n%s", r.name, r.logs)
			}
		})
	}
	for _, ch := range changes {
		ch <- struct{}{}
	}
	for _, r := range rs {
		for _, o := range rs {
			if o != r {
				eventually(t, 5*time.Second, r.name+" has a link to "+o.name, func() bool { return r.link(o.name) != nil })
			}
		}
	}
	return rs
}

func (r *peopleReplica) link(name string) *link {
	r.peers.mu.Lock()
	defer r.peers.mu.Unlock()
	return r.peers.links[name]
}

func (r *peopleReplica) person(t *testing.T, token string) (auth.Person, error) {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	p, ok, err := r.auth.Authenticate(req)
	if err == nil && !ok {
		err = errors.New("no credentials")
	}
	return p, err
}

func (r *peopleReplica) admits(t *testing.T, token string) bool {
	_, err := r.person(t, token)
	return err == nil
}

// stream is an event stream of p's held open on r, as the fleet page's.
func (r *peopleReplica) stream(p auth.Person) context.Context {
	ctx, cancel := context.WithCancelCause(context.Background())
	untrack := r.proxy.TrackEvents(p, cancel)
	context.AfterFunc(ctx, untrack)
	return ctx
}

// TestSignOutHoldsOnEveryReplica: alice signs out on a; within 2 s b
// refuses her session's token and has ended her event stream there, as a
// sign-out on b would.
func TestSignOutHoldsOnEveryReplica(t *testing.T) {
	old := time.Now().Add(-time.Hour)
	rs := startPeople(t, usersFile{"hub-a", aliceAndBob, old}, usersFile{"hub-b", aliceAndBob, old})
	a, b := rs[0], rs[1]
	alice, err := a.person(t, tokAlice)
	if err != nil {
		t.Fatal(err)
	}
	session, _, err := a.auth.IssueSession(alice)
	if err != nil {
		t.Fatal(err)
	}
	onA, err := a.person(t, session)
	if err != nil {
		t.Fatal(err)
	}
	onB, err := b.person(t, session)
	if err != nil {
		t.Fatalf("b refused a's session: %v", err)
	}
	stream := b.stream(onB)
	bob, _ := b.person(t, tokBob)
	bobStream := b.stream(bob)

	start := time.Now()
	a.auth.EndSessions(onA)
	answered := time.Since(start)
	eventually(t, 2*time.Second, "b refuses alice's session", func() bool { return !b.admits(t, session) })
	eventually(t, 2*time.Second, "b ends alice's stream", func() bool { return stream.Err() != nil })
	t.Logf("sign-out answered in %s; b refused the session and ended her stream %s after it", answered, time.Since(start))
	if answered > 1500*time.Millisecond {
		t.Errorf("the sign-out took %s to answer", answered)
	}
	if bobStream.Err() != nil || !b.admits(t, tokAlice) {
		t.Error("b ended more than alice's session")
	}
	if strings.Contains(a.logs.String(), "couldn't be told") {
		t.Errorf("a logged a failure to tell b")
	}
}

// TestSignOutToAReplicaThatDoesntAnswer: a sign-out waits a bounded time
// for a replica that can't be reached, and says which one it couldn't
// tell.
func TestSignOutToAReplicaThatDoesntAnswer(t *testing.T) {
	old := time.Now().Add(-time.Hour)
	rs := startPeople(t, usersFile{"hub-a", aliceAndBob, old}, usersFile{"hub-b", aliceAndBob, old})
	a, b := rs[0], rs[1]
	b.peer.Close()
	alice, _ := a.person(t, tokAlice)
	session, _, _ := a.auth.IssueSession(alice)
	onA, err := a.person(t, session)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	a.auth.EndSessions(onA)
	d := time.Since(start)
	t.Logf("the sign-out answered in %s", d)
	if d > 1500*time.Millisecond {
		t.Errorf("the sign-out took %s to answer", d)
	}
	eventually(t, 5*time.Second, "a warns it couldn't tell b", func() bool {
		return strings.Contains(a.logs.String(), "couldn't be told of a sign-out") && strings.Contains(a.logs.String(), "replica=hub-b")
	})
}

// TestUsersListHoldsOnEveryReplica: a's file changes, b's doesn't yet;
// within 2 s of a taking the new list in, b enforces it too (bob refused,
// his stream ended). Then b's own file comes round to the same list:
// nothing more happens. Then b's file changes again, later than a's, to
// the list of before: a change seen later is the newer (decision 034),
// so it holds on both.
func TestUsersListHoldsOnEveryReplica(t *testing.T) {
	old := time.Now().Add(-time.Hour)
	rs := startPeople(t, usersFile{"hub-a", aliceAndBob, old}, usersFile{"hub-b", aliceAndBob, old})
	a, b := rs[0], rs[1]
	bob, err := b.person(t, tokBob)
	if err != nil {
		t.Fatal(err)
	}
	bobStream := b.stream(bob)

	start := time.Now()
	files.Replace(t, a.users, aliceOnly)
	eventually(t, 5*time.Second, "a refuses bob", func() bool { return !a.admits(t, tokBob) })
	onA := time.Since(start)
	eventually(t, 2*time.Second, "b refuses bob", func() bool { return !b.admits(t, tokBob) })
	eventually(t, 2*time.Second, "b ends bob's stream", func() bool { return bobStream.Err() != nil })
	t.Logf("a refused bob %s after its file changed; b refused him and ended his stream by %s", onA, time.Since(start))
	if !b.admits(t, tokAlice) || b.changed.Load() != 1 {
		t.Errorf("b: alice admitted %v, OnUsersChanged %d times", b.admits(t, tokAlice), b.changed.Load())
	}
	inA, _ := a.auth.Users()
	if inB, _ := b.auth.Users(); inB.Hash != inA.Hash || !inB.At.Equal(inA.At) {
		t.Errorf("b's list in force is not a's: %+v", inB)
	}

	// b's own file comes round: nothing more.
	files.Replace(t, b.users, aliceOnly)
	eventually(t, 5*time.Second, "b reads its file", func() bool {
		return strings.Contains(b.logs.String(), "changed to the one in force already")
	})
	if inB, _ := b.auth.Users(); inB.Hash != inA.Hash || !inB.At.Equal(inA.At) || b.changed.Load() != 1 {
		t.Errorf("b's file changing to the list in force changed it (%d reloads)", b.changed.Load())
	}
	if strings.Contains(b.logs.String(), "Reloaded the users list") || a.changed.Load() != 1 {
		t.Errorf("b's file changing to the list in force was taken as news (a reloaded %d times)", a.changed.Load())
	}

	// b's file changes later to the list of before: it is the newest.
	start = time.Now()
	files.Replace(t, b.users, aliceAndBob)
	eventually(t, 5*time.Second, "b admits bob again", func() bool { return b.admits(t, tokBob) })
	onB := time.Since(start)
	eventually(t, 2*time.Second, "a admits bob again", func() bool { return a.admits(t, tokBob) })
	t.Logf("b admitted bob again %s after its file changed, a by %s", onB, time.Since(start))
}

// TestAJoiningReplicaGetsTheNewestList: b starts with a file older than
// the list a has (a pod whose volume the kubelet hasn't updated yet): b
// takes a's at once, and a keeps its own.
func TestAJoiningReplicaGetsTheNewestList(t *testing.T) {
	now := time.Now()
	rs := startPeople(t, usersFile{"hub-a", aliceOnly, now.Add(-time.Minute)}, usersFile{"hub-b", aliceAndBob, now.Add(-time.Hour)})
	a, b := rs[0], rs[1]
	eventually(t, 2*time.Second, "b refuses bob", func() bool { return !b.admits(t, tokBob) })
	if a.admits(t, tokBob) || a.changed.Load() != 0 {
		t.Errorf("a took b's older list")
	}
}

// TestAUsersListThatDoesntParseIsRefused: a list another replica sends
// that doesn't parse is refused, and logged; the list in force stays.
func TestAUsersListThatDoesntParseIsRefused(t *testing.T) {
	old := time.Now().Add(-time.Hour)
	rs := startPeople(t, usersFile{"hub-a", aliceAndBob, old}, usersFile{"hub-b", aliceAndBob, old})
	a, b := rs[0], rs[1]
	bad := auth.UsersList{Data: []byte("- name: bob\n  token: short\n"), At: time.Now()}
	bad.Hash = sha256Of(bad.Data)
	body, _ := json.Marshal(a.peers.people.usersMessage(bad))
	err := a.peers.people.deliver(a.link("hub-b"), usersPath, body, usersRetries)
	if !errors.Is(err, errRefused) || !strings.Contains(err.Error(), "needs a token of at least 32 characters") {
		t.Errorf("deliver = %v, want refused for the short token", err)
	}
	if log := b.logs.String(); !strings.Contains(log, "Refused a users list from another hub replica; keeping the one in force") || !strings.Contains(log, "replica=hub-a") {
		t.Errorf("b's log doesn't say it refused a's list:\n%s", log)
	}
	if !b.admits(t, tokBob) || b.changed.Load() != 0 {
		t.Error("b's list in force changed")
	}
}

func sha256Of(b []byte) [32]byte { return sha256.Sum256(b) }

// TestThreeReplicasStartedWithDifferentLists: a and b have the same list,
// their volumes written at different times, c another written between:
// all three end with b's, the latest, whichever replica each asked first.
func TestThreeReplicasStartedWithDifferentLists(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	rs := startPeople(t, usersFile{"hub-a", aliceAndBob, now.Add(-3 * time.Hour)}, usersFile{"hub-b", aliceAndBob, now.Add(-time.Hour)},
		usersFile{"hub-c", aliceOnly, now.Add(-2 * time.Hour)})
	want, _ := rs[1].auth.Users()
	eventually(t, 2*time.Second, "every replica holds b's list", func() bool {
		for _, r := range rs {
			if in, _ := r.auth.Users(); in.Hash != want.Hash || !in.At.Equal(want.At) {
				return false
			}
		}
		return true
	})
	for _, r := range rs {
		if !r.admits(t, tokBob) {
			t.Errorf("%s refuses bob", r.name)
		}
	}
}
