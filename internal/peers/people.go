package peers

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/tetherhq/tether/internal/auth"
)

// What holds of people on every replica (issue 35, decision 034): a
// sign-out on one voids the person's page sessions on all, and ends what
// they hold open there; and the users list the first replica to see a new
// one loads is in force on all, within 2 s, rather than when the kubelet
// gets round to each pod's Secret volume.
//
// A replica tells every other of each sign-out (POST signOutsPath) and of
// each users list its own file brings in (POST usersPath); and when a link
// to a replica starts, it asks that replica for its list (GET usersPath),
// so a replica that joins gets the newest, and a newer one it brings is
// taken by the others. A list is taken only when newer than the one in
// force (auth.UsersList.NewerThan), and a list taken from another replica
// is not sent on: the one that loaded it tells everyone.

const (
	signOutsPath = "/peer/v1/signouts"
	usersPath    = "/peer/v1/users"
)

// PeopleConfig is what carrying sign-outs and the users list needs; a zero
// one (no Auth) carries neither.
type PeopleConfig struct {
	Auth *auth.Authenticator
	// SignedOut ends what a person holds open here (their requests,
	// watches and page event streams) once another replica tells of their
	// sign-out, as a sign-out on this one does: kubeproxy.Proxy.SignedOut.
	SignedOut func(person string)
	// Wait bounds how long a sign-out waits for the other replicas to
	// have it before the person gets their answer (and before what they
	// hold open here ends); the telling goes on after. Zero means 500 ms.
	Wait time.Duration
}

// signOutMessage is the body of POST signOutsPath.
type signOutMessage struct {
	Replica string    `json:"replica"` // who tells
	Person  string    `json:"person"`
	At      time.Time `json:"at"`
	Until   time.Time `json:"until"`
}

// usersMessage is the body of POST usersPath, and the answer to GET.
type usersMessage struct {
	Replica string    `json:"replica"` // who sends it
	Data    []byte    `json:"data"`
	SHA256  string    `json:"sha256"`
	At      time.Time `json:"at"` // when its content was first taken in
}

// maxUsersBody bounds a users list between replicas: a list of 10,000
// people with two tokens each is about 2 MB, and base64 adds a third.
const maxUsersBody = 16 << 20

// Delivery: a sign-out is tried three times within about 2 s, then given
// up with a warning; a users list, which the replica that misses it only
// gets again when its own file changes, for about 30 s.
var (
	signOutRetries = []time.Duration{0, 200 * time.Millisecond, 800 * time.Millisecond}
	usersRetries   = []time.Duration{0, 200 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second}
)

// attemptTimeout bounds one attempt to tell a replica.
const attemptTimeout = 2 * time.Second

// people carries sign-outs and users lists between this replica and the
// others. A nil *people carries nothing.
type people struct {
	p     *Peers
	cfg   PeopleConfig
	stops []func()
	wg    sync.WaitGroup // deliveries and asks under way

	mu     sync.Mutex // guards closed, so no delivery starts once close has begun
	closed bool
}

// newPeople hooks into cfg.People.Auth, or returns nil without one.
func (p *Peers) newPeople() *people {
	cfg := p.cfg.People
	if cfg.Auth == nil {
		return nil
	}
	if cfg.Wait == 0 {
		cfg.Wait = 500 * time.Millisecond
	}
	if cfg.SignedOut == nil {
		cfg.SignedOut = func(string) {}
	}
	pp := &people{p: p, cfg: cfg}
	pp.stops = append(pp.stops,
		cfg.Auth.OnSignOut(pp.signedOut),
		cfg.Auth.OnUsersLoaded(pp.usersLoaded))
	return pp
}

// routes adds the peer port's routes for people.
func (pp *people) routes(mux *http.ServeMux) {
	if pp == nil {
		return
	}
	mux.HandleFunc("POST "+signOutsPath, pp.serveSignOut)
	mux.HandleFunc("POST "+usersPath, pp.serveUsersPost)
	mux.HandleFunc("GET "+usersPath, pp.serveUsersGet)
}

// close stops telling, and waits for what is under way to end: Peers'
// context, which they go by, is done by then.
func (pp *people) close() {
	if pp == nil {
		return
	}
	for _, stop := range pp.stops {
		stop()
	}
	pp.mu.Lock()
	pp.closed = true
	pp.mu.Unlock()
	pp.wg.Wait()
}

// goTrack runs f on its own goroutine unless close has begun.
func (pp *people) goTrack(f func()) bool {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if pp.closed {
		return false
	}
	pp.wg.Add(1)
	go func() {
		defer pp.wg.Done()
		f()
	}()
	return true
}

// linkTargets are the replicas this one has a link to now: those alive.
func (pp *people) linkTargets() []*link {
	pp.p.mu.Lock()
	defer pp.p.mu.Unlock()
	ls := make([]*link, 0, len(pp.p.links))
	for _, l := range pp.p.links {
		ls = append(ls, l)
	}
	return ls
}

// signedOut tells every other replica of a sign-out here, and waits for
// them up to cfg.Wait.
func (pp *people) signedOut(name string, at, until time.Time) {
	body, _ := json.Marshal(signOutMessage{Replica: pp.p.cfg.Members.Self(), Person: name, At: at, Until: until})
	var told sync.WaitGroup
	for _, l := range pp.linkTargets() {
		told.Add(1)
		if !pp.goTrack(func() {
			defer told.Done()
			if err := pp.deliver(l, signOutsPath, body, signOutRetries); err != nil && pp.p.ctx.Err() == nil {
				pp.p.log.Warn("Another hub replica couldn't be told of a sign-out; sessions signed out still work there until they expire",
					"replica", l.name, "user", name, "err", err)
			}
		}) {
			told.Done()
		}
	}
	done := make(chan struct{})
	go func() {
		told.Wait()
		close(done)
	}()
	wait := time.NewTimer(pp.cfg.Wait)
	defer wait.Stop()
	select {
	case <-done:
	case <-wait.C:
	}
}

// usersLoaded tells every other replica of a users list this one's file
// brought in. It doesn't wait: it runs on the file watcher's goroutine.
func (pp *people) usersLoaded(l auth.UsersList) {
	body, _ := json.Marshal(pp.usersMessage(l))
	for _, lk := range pp.linkTargets() {
		pp.goTrack(func() {
			if err := pp.deliver(lk, usersPath, body, usersRetries); err != nil && pp.p.ctx.Err() == nil {
				pp.p.log.Warn("Another hub replica couldn't be given the users list; it has it when its own file changes",
					"replica", lk.name, "sha256", hex.EncodeToString(l.Hash[:]), "err", err)
			}
		})
	}
}

func (pp *people) usersMessage(l auth.UsersList) usersMessage {
	return usersMessage{Replica: pp.p.cfg.Members.Self(), Data: l.Data, SHA256: hex.EncodeToString(l.Hash[:]), At: l.At}
}

// deliver posts body to the replica at path, trying again after each of
// waits but the first, until it answers 2xx.
func (pp *people) deliver(l *link, path string, body []byte, waits []time.Duration) error {
	var err error
	for _, w := range waits {
		if w > 0 {
			select {
			case <-pp.p.ctx.Done():
				return pp.p.ctx.Err()
			case <-time.After(w):
			}
		}
		if err = pp.post(l, path, body); err == nil {
			return nil
		}
		if errors.Is(err, errRefused) {
			return err // it read it, and won't have it: saying it again changes nothing
		}
	}
	return err
}

// errRefused is a replica's answer that it read what was sent and won't
// take it.
var errRefused = errors.New("refused")

func (pp *people) post(l *link, path string, body []byte) error {
	ctx, cancel := context.WithTimeout(pp.p.ctx, attemptTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+l.addr+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := l.transport.RoundTrip(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	why, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	switch {
	case resp.StatusCode/100 == 2:
		return nil
	case resp.StatusCode == http.StatusUnprocessableEntity:
		return fmt.Errorf("%w: %s", errRefused, bytes.TrimSpace(why))
	}
	return fmt.Errorf("it answered %s: %s", resp.Status, bytes.TrimSpace(why))
}

// linked asks a replica a link has just started to for its users list,
// and takes it if it is newer: a replica that joins gets the newest list
// from those already running, and they get a newer one it brings.
func (pp *people) linked(l *link) {
	if pp == nil {
		return
	}
	if _, ok := pp.cfg.Auth.Users(); !ok {
		return
	}
	pp.goTrack(func() {
		var err error
		for _, w := range usersRetries {
			if w > 0 {
				select {
				case <-pp.p.ctx.Done():
					return
				case <-l.done:
					return // the link stopped: the replica went
				case <-time.After(w):
				}
			}
			if err = pp.ask(l); err == nil || errors.Is(err, errRefused) {
				break
			}
		}
		if err != nil && !errors.Is(err, errRefused) && pp.p.ctx.Err() == nil {
			pp.p.log.Warn("Can't get the users list of another hub replica", "replica", l.name, "err", err)
		}
	})
}

// ask gets l's users list, and takes it if it is newer.
func (pp *people) ask(l *link) error {
	ctx, cancel := context.WithTimeout(pp.p.ctx, attemptTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+l.addr+usersPath, nil)
	if err != nil {
		return err
	}
	resp, err := l.transport.RoundTrip(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		why, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		err := fmt.Errorf("it answered %s: %s", resp.Status, bytes.TrimSpace(why))
		if resp.StatusCode == http.StatusNotFound {
			err = fmt.Errorf("%w: %w", errRefused, err) // it has no users list
		}
		return err
	}
	var m usersMessage
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxUsersBody)).Decode(&m); err != nil {
		return fmt.Errorf("its users list is not JSON: %w", err)
	}
	if err := pp.take(m, l.name); err != nil {
		return fmt.Errorf("%w: %w", errRefused, err)
	}
	return nil
}

// take puts in force a users list another replica sent, if it is newer
// than the one here; from names that replica, for the log.
func (pp *people) take(m usersMessage, from string) error {
	l := auth.UsersList{Data: m.Data, At: m.At}
	h, err := hex.DecodeString(m.SHA256)
	if err != nil || len(h) != len(l.Hash) {
		err := errors.New("its sha256 is not 64 hex digits")
		pp.p.log.Warn("Refused a users list from another hub replica; keeping the one in force", "replica", from, "err", err)
		return err
	}
	copy(l.Hash[:], h)
	took, err := pp.cfg.Auth.TakeUsers(l)
	if err != nil {
		pp.p.log.Warn("Refused a users list from another hub replica; keeping the one in force", "replica", from, "sha256", m.SHA256, "err", err)
		return err
	}
	if took {
		pp.p.log.Info("Took the users list another hub replica loaded", "replica", from, "sha256", m.SHA256, "loaded", m.At)
	}
	return nil
}

func (pp *people) serveSignOut(w http.ResponseWriter, r *http.Request) {
	var m signOutMessage
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&m); err != nil || m.Person == "" || m.At.IsZero() || m.Until.IsZero() {
		http.Error(w, "a sign-out names a person, when, and until when", http.StatusUnprocessableEntity)
		return
	}
	pp.cfg.Auth.SignedOutElsewhere(m.Person, m.At, m.Until)
	// Their event streams and requests here end now, as on the replica
	// they signed out on.
	pp.cfg.SignedOut(m.Person)
	pp.p.log.Debug("Took a sign-out from another hub replica", "replica", m.Replica, "user", m.Person)
	w.WriteHeader(http.StatusNoContent)
}

func (pp *people) serveUsersPost(w http.ResponseWriter, r *http.Request) {
	var m usersMessage
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxUsersBody)).Decode(&m); err != nil {
		http.Error(w, "a users list is JSON: "+err.Error(), http.StatusUnprocessableEntity)
		return
	}
	if err := pp.take(m, m.Replica); err != nil {
		http.Error(w, err.Error(), http.StatusUnprocessableEntity)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (pp *people) serveUsersGet(w http.ResponseWriter, r *http.Request) {
	l, ok := pp.cfg.Auth.Users()
	if !ok {
		http.Error(w, auth.ErrNoUsersList.Error(), http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(pp.usersMessage(l))
}
