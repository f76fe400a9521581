package login_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/login"
	"github.com/tetherhq/tether/internal/web"
)

const (
	aliceToken = "alice-token-0123456789abcdef0123456789"
	users      = `
- name: alice
  token: ` + aliceToken + `
  groups: [dev]
`
)

// pageHub is a hub with the real sign-in pages and token endpoints, and a
// cluster list of one, eu-1.
type pageHub struct {
	url    string
	people *auth.Authenticator
}

func startPageHub(t *testing.T) *pageHub {
	t.Helper()
	people, err := auth.New(auth.Config{Users: users})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { people.Close() })
	srv := httptest.NewUnstartedServer(nil)
	h := &pageHub{url: "http://" + srv.Listener.Addr().String(), people: people}
	wb := web.New(web.Config{Auth: people, PublicURL: h.url})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /login/cli", wb.ServeCLILogin)
	mux.HandleFunc("POST /login", wb.ServeLogin)
	mux.HandleFunc("POST /api/login/token", wb.ServeLoginToken)
	mux.HandleFunc("POST /api/login/device", wb.ServeDeviceStart)
	mux.HandleFunc("GET /device", wb.ServeDevicePage)
	mux.HandleFunc("POST /device", wb.ServeDeviceApprove)
	mux.HandleFunc("GET /api/clusters", func(w http.ResponseWriter, r *http.Request) {
		if p, ok, err := people.Authenticate(r); !ok || err != nil || p.Name != "alice" {
			http.Error(w, "who?", http.StatusUnauthorized)
			return
		}
		io.WriteString(w, `[{"name":"eu-1"}]`)
	})
	srv.Config.Handler = mux
	srv.Start()
	t.Cleanup(srv.Close)
	return h
}

// whose says whose token the hub takes token as.
func (h *pageHub) whose(token string) string {
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("Authorization", "Bearer "+token)
	p, ok, err := h.people.Authenticate(r)
	if !ok || err != nil {
		return fmt.Sprintf("no one (%v)", err)
	}
	return p.Name
}

// browse is a browser that alice signs in with: it opens the address,
// finds the sign-in form, signs in with her token, and follows the hub's
// redirects back to tether login's loopback listener.
func (h *pageHub) browse(target string) error {
	jar, _ := cookiejar.New(nil)
	b := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	defer b.CloseIdleConnections()
	// Someone else's page hitting the listener with another state is
	// turned away, and the sign-in goes on.
	u, _ := url.Parse(target)
	redirect, _ := url.Parse(u.Query().Get("redirect_uri"))
	if resp, err := b.Get(redirect.String() + "?code=x&state=forged"); err != nil || resp.StatusCode != http.StatusBadRequest {
		return fmt.Errorf("a forged state: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	resp, err := b.Get(target)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		return fmt.Errorf("/login/cli before signing in: %d", resp.StatusCode)
	}
	resp, err = b.PostForm(h.url+"/login", url.Values{"token": {aliceToken}, "next": {"/login/cli"}})
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "signed in") || resp.Request.URL.Host != redirect.Host {
		return fmt.Errorf("signing in ended at %s: %d %s", resp.Request.URL, resp.StatusCode, body)
	}
	return nil
}

type bed struct {
	cache login.Cache
	kube  string
}

func newBed(t *testing.T) bed {
	dir := t.TempDir()
	return bed{cache: login.Cache{Dir: filepath.Join(dir, "cache")}, kube: filepath.Join(dir, "kubeconfig")}
}

func (b bed) login(ctx context.Context, hub string, in login.Interactive) (string, error) {
	var out bytes.Buffer
	err := login.Login(ctx, login.LoginOptions{Hub: hub, Kubeconfig: b.kube, Command: "tether", Cache: b.cache,
		Now: time.Now, Out: &out, Interactive: in})
	return out.String(), err
}

// TestLoginBrowser: tether login opens the hub's page, alice signs in, and
// the command gets her hub token through the loopback, caches it and
// writes the context.
func TestLoginBrowser(t *testing.T) {
	h := startPageHub(t)
	b := newBed(t)
	var msg bytes.Buffer
	out, err := b.login(t.Context(), h.url, login.Interactive{OpenBrowser: h.browse, Msg: &msg})
	if err != nil {
		t.Fatalf("login: %v (said %s)", err, msg.String())
	}
	if !strings.Contains(msg.String(), h.url+"/login/cli?") {
		t.Errorf("the address to open wasn't printed: %s", msg.String())
	}
	cached, err := b.cache.Load(h.url)
	if err != nil {
		t.Fatal(err)
	}
	if cached.Method != login.MethodBrowser || h.whose(cached.Token) != "alice" || cached.Expires.IsZero() {
		t.Errorf("cached %s, token for %s, expiring %s; want alice's, by browser", cached.Method, h.whose(cached.Token), cached.Expires)
	}
	kc, _ := os.ReadFile(b.kube)
	if !strings.Contains(out, "/eu-1") || !strings.Contains(string(kc), "interactiveMode: IfAvailable") {
		t.Errorf("login said %q and wrote %s", out, kc)
	}
}

// lines is a Msg writer that hands each line to a channel.
type lines struct {
	mu  sync.Mutex
	buf bytes.Buffer
	ch  chan string
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	for {
		line, err := l.buf.ReadString('\n')
		if err != nil {
			l.buf.WriteString(line)
			return len(p), nil
		}
		select {
		case l.ch <- line:
		default:
		}
	}
}

// TestLoginDevice: where the browser doesn't start, tether login shows a
// code; alice approves it on /device, and the command gets her token.
func TestLoginDevice(t *testing.T) {
	h := startPageHub(t)
	b := newBed(t)
	msg := &lines{ch: make(chan string, 16)}
	approved := make(chan error, 1)
	go func() {
		for line := range msg.ch {
			_, rest, ok := strings.Cut(line, "enter the code ")
			if !ok {
				continue
			}
			form := url.Values{"user_code": {strings.TrimSpace(rest)}, "decision": {"approve"}}
			req, _ := http.NewRequest("POST", h.url+"/device", strings.NewReader(form.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Authorization", "Bearer "+aliceToken)
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("POST /device: %d", resp.StatusCode)
				}
			}
			approved <- err
			return
		}
	}()
	noBrowser := func(string) error { return errors.New("exec: xdg-open: not found") }
	_, err := b.login(t.Context(), h.url, login.Interactive{OpenBrowser: noBrowser, Msg: msg})
	close(msg.ch)
	if err != nil {
		t.Fatalf("login: %v", err)
	}
	if err := <-approved; err != nil {
		t.Fatal(err)
	}
	cached, err := b.cache.Load(h.url)
	if err != nil {
		t.Fatal(err)
	}
	if cached.Method != login.MethodDevice || h.whose(cached.Token) != "alice" {
		t.Errorf("cached %s, token for %s; want alice's, by device", cached.Method, h.whose(cached.Token))
	}
	http.DefaultClient.CloseIdleConnections()
}

// TestCredentialSignsInAgainOnlyInteractive: an expired browser sign-in is
// renewed in the browser when kubectl says the plugin is interactive, and
// refused with what to run when it isn't.
func TestCredentialSignsInAgainOnlyInteractive(t *testing.T) {
	h := startPageHub(t)
	b := newBed(t)
	if err := b.cache.Save(&login.Cached{Hub: h.url, Method: login.MethodBrowser, Token: "old", Expires: time.Now().Add(-time.Minute)}); err != nil {
		t.Fatal(err)
	}
	var out, msg bytes.Buffer
	o := login.CredentialOptions{Hub: h.url, Cache: b.cache, Now: time.Now, Out: &out,
		SignIn: login.Interactive{OpenBrowser: h.browse, Msg: &msg}}
	err := login.Credential(t.Context(), o)
	if err == nil || !strings.Contains(err.Error(), "run tether login --hub "+h.url) {
		t.Fatalf("not interactive: %v; want a message saying to run tether login", err)
	}
	o.Interactive = true
	if err := login.Credential(t.Context(), o); err != nil {
		t.Fatalf("interactive: %v", err)
	}
	var cred struct {
		Status struct{ Token string } `json:"status"`
	}
	if err := json.NewDecoder(bufio.NewReader(&out)).Decode(&cred); err != nil || h.whose(cred.Status.Token) != "alice" {
		t.Errorf("the credential: %v, token for %s", err, h.whose(cred.Status.Token))
	}
}

func TestExecInteractive(t *testing.T) {
	for info, want := range map[string]bool{
		"": false,
		`{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","spec":{"interactive":true}}`:  true,
		`{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","spec":{"interactive":false}}`: false,
		`{"spec":`: false,
	} {
		if got := login.ExecInteractive(info); got != want {
			t.Errorf("ExecInteractive(%q) = %v, want %v", info, got, want)
		}
	}
}
