package web

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/clock"
)

const (
	cliAlice = "alice-token-0123456789abcdef0123456789"
	cliUsers = `
- name: alice
  token: ` + cliAlice + `
  groups: [dev]
`
	cliVerifier = "verifier-0123456789-0123456789-0123456789-abc"
	cliLoopback = "http://127.0.0.1:43210/callback"
)

func cliWeb(t *testing.T) (*Web, *auth.Authenticator, *clock.Fake) {
	t.Helper()
	people, err := auth.New(auth.Config{Users: cliUsers})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { people.Close() })
	clk := clock.NewFake(time.Now())
	return New(Config{Auth: people, PublicURL: "http://hub.test", Clock: clk}), people, clk
}

func challenge(verifier string) string {
	sum := sha256.Sum256([]byte(verifier))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

func cliQuery(redirect string) url.Values {
	return url.Values{"redirect_uri": {redirect}, "code_challenge": {challenge(cliVerifier)},
		"code_challenge_method": {"S256"}, "state": {"state-1"}}
}

// cliCodeFor signs alice in at /login/cli and returns the code the
// browser is sent back with.
func cliCodeFor(t *testing.T, wb *Web, q url.Values) string {
	t.Helper()
	r := httptest.NewRequest("GET", "/login/cli?"+q.Encode(), nil)
	r.Header.Set("Authorization", "Bearer "+cliAlice)
	rec := httptest.NewRecorder()
	wb.ServeCLILogin(rec, r)
	if rec.Code != http.StatusFound {
		t.Fatalf("/login/cli: %d %s, want a redirect", rec.Code, rec.Body)
	}
	loc, err := url.Parse(rec.Header().Get("Location"))
	if err != nil || loc.Host != "127.0.0.1:43210" || loc.Query().Get("state") != "state-1" || loc.Query().Get("code") == "" {
		t.Fatalf("/login/cli sent the browser to %q", rec.Header().Get("Location"))
	}
	return loc.Query().Get("code")
}

// postToken posts form to /api/login/token, and returns the status and
// the answer's error code or token.
func postToken(t *testing.T, wb *Web, form url.Values) (int, string) {
	t.Helper()
	r := httptest.NewRequest("POST", "/api/login/token", strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec := httptest.NewRecorder()
	wb.ServeLoginToken(rec, r)
	var ans struct {
		Error string `json:"error"`
		Token string `json:"access_token"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &ans); err != nil {
		t.Fatalf("/api/login/token answered %d %q, not JSON", rec.Code, rec.Body)
	}
	if ans.Error != "" {
		return rec.Code, ans.Error
	}
	return rec.Code, ans.Token
}

func codeForm(code, verifier, redirect string) url.Values {
	return url.Values{"grant_type": {"authorization_code"}, "code": {code}, "code_verifier": {verifier}, "redirect_uri": {redirect}}
}

// TestCLILoginRefusesBadRequests: only a loopback redirect URI and an S256
// challenge are taken, and a refused request never redirects.
func TestCLILoginRefusesBadRequests(t *testing.T) {
	wb, _, _ := cliWeb(t)
	for name, mod := range map[string]func(url.Values){
		"another host":        func(q url.Values) { q.Set("redirect_uri", "http://evil.example/callback") },
		"https loopback":      func(q url.Values) { q.Set("redirect_uri", "https://127.0.0.1:1/callback") },
		"a userinfo":          func(q url.Values) { q.Set("redirect_uri", "http://evil.example@127.0.0.1:1/") },
		"127.0.0.1.evil":      func(q url.Values) { q.Set("redirect_uri", "http://127.0.0.1.evil.example:1/") },
		"a custom scheme":     func(q url.Values) { q.Set("redirect_uri", "tether://callback") },
		"no redirect":         func(q url.Values) { q.Del("redirect_uri") },
		"plain method":        func(q url.Values) { q.Set("code_challenge_method", "plain") },
		"short challenge":     func(q url.Values) { q.Set("code_challenge", "abc") },
		"no state":            func(q url.Values) { q.Del("state") },
		"a state with spaces": func(q url.Values) { q.Set("state", "a b") },
	} {
		q := cliQuery(cliLoopback)
		mod(q)
		r := httptest.NewRequest("GET", "/login/cli?"+q.Encode(), nil)
		r.Header.Set("Authorization", "Bearer "+cliAlice)
		rec := httptest.NewRecorder()
		wb.ServeCLILogin(rec, r)
		if rec.Code != http.StatusBadRequest || rec.Header().Get("Location") != "" {
			t.Errorf("%s: %d, Location %q; want 400 and no redirect", name, rec.Code, rec.Header().Get("Location"))
		}
	}
	for _, ok := range []string{"http://[::1]:5/x", "http://localhost:5/", "http://127.0.0.1/"} {
		r := httptest.NewRequest("GET", "/login/cli?"+cliQuery(ok).Encode(), nil)
		r.Header.Set("Authorization", "Bearer "+cliAlice)
		rec := httptest.NewRecorder()
		wb.ServeCLILogin(rec, r)
		if loc := rec.Header().Get("Location"); rec.Code != http.StatusFound || !strings.HasPrefix(loc, ok+"?") {
			t.Errorf("%s: %d to %q; want a redirect there", ok, rec.Code, loc)
		}
	}
}

// TestCLILoginSignsInFirst: someone not signed in gets the sign-in form,
// and the request is kept in a cookie for when they come back.
func TestCLILoginSignsInFirst(t *testing.T) {
	wb, _, _ := cliWeb(t)
	q := cliQuery(cliLoopback)
	rec := httptest.NewRecorder()
	wb.ServeCLILogin(rec, httptest.NewRequest("GET", "/login/cli?"+q.Encode(), nil))
	if rec.Code != http.StatusUnauthorized || !strings.Contains(rec.Body.String(), `name="next" value="/login/cli"`) {
		t.Fatalf("not signed in: %d %s; want the sign-in form returning to /login/cli", rec.Code, rec.Body)
	}
	var kept *http.Cookie
	for _, c := range rec.Result().Cookies() {
		if c.Name == cliCookie {
			kept = c
		}
	}
	if kept == nil || !kept.HttpOnly {
		t.Fatalf("no HttpOnly %s cookie: %v", cliCookie, rec.Result().Cookies())
	}
	// Back, signed in, at /login/cli without its query.
	r := httptest.NewRequest("GET", "/login/cli", nil)
	r.AddCookie(kept)
	r.Header.Set("Authorization", "Bearer "+cliAlice)
	rec = httptest.NewRecorder()
	wb.ServeCLILogin(rec, r)
	if loc := rec.Header().Get("Location"); rec.Code != http.StatusFound || !strings.HasPrefix(loc, cliLoopback+"?") {
		t.Fatalf("back signed in: %d to %q; want the loopback", rec.Code, loc)
	}
	if got := wb.returnTo("/login/cli"); got != "/login/cli" {
		t.Errorf("returnTo(/login/cli) = %q", got)
	}
}

// TestCLICodes: a code is traded once, with its verifier and redirect URI,
// within its minute, for a token the hub takes as alice.
func TestCLICodes(t *testing.T) {
	wb, people, clk := cliWeb(t)
	code := cliCodeFor(t, wb, cliQuery(cliLoopback))
	for name, form := range map[string]url.Values{
		"wrong verifier":     codeForm(code, cliVerifier+"x", cliLoopback),
		"wrong redirect":     codeForm(code, cliVerifier, "http://127.0.0.1:1/callback"),
		"forged code":        codeForm("A"+code[1:], cliVerifier, cliLoopback),
		"not a code":         codeForm("hello", cliVerifier, cliLoopback),
		"a short verifier":   codeForm(code, "short", cliLoopback),
		"another grant type": {"grant_type": {"password"}},
	} {
		if status, got := postToken(t, wb, form); status != http.StatusBadRequest || (got != "invalid_grant" && got != "invalid_request" && got != "unsupported_grant_type") {
			t.Errorf("%s: %d %s; want 400 and an OAuth error", name, status, got)
		}
	}
	status, token := postToken(t, wb, codeForm(code, cliVerifier, cliLoopback))
	if status != http.StatusOK {
		t.Fatalf("the code: %d %s", status, token)
	}
	r := httptest.NewRequest("GET", "/api/clusters", nil)
	r.Header.Set("Authorization", "Bearer "+token)
	if p, ok, err := people.Authenticate(r); !ok || err != nil || p.Name != "alice" {
		t.Errorf("the token is %+v %v %v; want alice's", p, ok, err)
	}
	if status, got := postToken(t, wb, codeForm(code, cliVerifier, cliLoopback)); status != http.StatusBadRequest || got != "invalid_grant" {
		t.Errorf("the code again: %d %s; want invalid_grant", status, got)
	}
	late := cliCodeFor(t, wb, cliQuery(cliLoopback))
	clk.Step(cliCodeTTL)
	if status, got := postToken(t, wb, codeForm(late, cliVerifier, cliLoopback)); status != http.StatusBadRequest || got != "invalid_grant" {
		t.Errorf("an expired code: %d %s; want invalid_grant", status, got)
	}
	// Another hub (another signing key) can't redeem it.
	other, _, _ := cliWeb(t)
	fresh := cliCodeFor(t, wb, cliQuery(cliLoopback))
	if status, got := postToken(t, other, codeForm(fresh, cliVerifier, cliLoopback)); status != http.StatusBadRequest || got != "invalid_grant" {
		t.Errorf("another hub's code: %d %s; want invalid_grant", status, got)
	}
}

// TestUsedCodesBounded: past maxUsedCodes unexpired codes, none is taken.
func TestUsedCodesBounded(t *testing.T) {
	var u usedCodes
	u.seen = map[[32]byte]time.Time{}
	now := time.Now()
	for i := range maxUsedCodes {
		if err := u.use(string(rune(i))+"code", now.Add(time.Minute), now); err != nil {
			t.Fatalf("code %d: %v", i, err)
		}
	}
	if err := u.use("one more", now.Add(time.Minute), now); err == nil {
		t.Error("a code past the bound was taken")
	}
	if err := u.use("one more", now.Add(2*time.Minute), now.Add(time.Minute)); err != nil {
		t.Errorf("once the others expired: %v", err)
	}
}

// deviceStart asks for a device sign-in.
func deviceStart(t *testing.T, wb *Web) (device, user string) {
	t.Helper()
	rec := httptest.NewRecorder()
	wb.ServeDeviceStart(rec, httptest.NewRequest("POST", "/api/login/device", nil))
	var ans struct {
		DeviceCode, UserCode, VerificationURI string
		Interval, ExpiresIn                   int
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &struct {
		D *string `json:"device_code"`
		U *string `json:"user_code"`
		V *string `json:"verification_uri"`
		I *int    `json:"interval"`
		E *int    `json:"expires_in"`
	}{&ans.DeviceCode, &ans.UserCode, &ans.VerificationURI, &ans.Interval, &ans.ExpiresIn}); err != nil || rec.Code != http.StatusOK {
		t.Fatalf("/api/login/device: %d %s", rec.Code, rec.Body)
	}
	if len(ans.UserCode) != 9 || ans.UserCode[4] != '-' || ans.VerificationURI != "http://hub.test/device" || ans.Interval != 5 || ans.ExpiresIn != 300 {
		t.Fatalf("/api/login/device: %+v", ans)
	}
	return ans.DeviceCode, ans.UserCode
}

// approve posts /device as alice.
func approve(t *testing.T, wb *Web, user, decision string) int {
	t.Helper()
	form := url.Values{"user_code": {user}, "decision": {decision}}
	r := httptest.NewRequest("POST", "/device", strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.Header.Set("Authorization", "Bearer "+cliAlice)
	rec := httptest.NewRecorder()
	wb.ServeDeviceApprove(rec, r)
	return rec.Code
}

func devicePoll(t *testing.T, wb *Web, device string) (int, string) {
	return postToken(t, wb, url.Values{"grant_type": {grantDevice}, "device_code": {device}})
}

// TestDeviceSignIn: pending until approved, slow_down when polled too
// often, the token once, refused and expired codes said so.
func TestDeviceSignIn(t *testing.T) {
	wb, people, clk := cliWeb(t)
	device, user := deviceStart(t, wb)
	if _, got := devicePoll(t, wb, device); got != "authorization_pending" {
		t.Fatalf("first poll: %s", got)
	}
	if _, got := devicePoll(t, wb, device); got != "slow_down" {
		t.Fatalf("a poll at once: %s, want slow_down", got)
	}
	clk.Step(10 * time.Second)
	// The page shows the form to a signed-in person, the code filled in.
	r := httptest.NewRequest("GET", "/device?user_code="+user, nil)
	r.Header.Set("Authorization", "Bearer "+cliAlice)
	rec := httptest.NewRecorder()
	wb.ServeDevicePage(rec, r)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `value="`+user+`"`) {
		t.Fatalf("GET /device: %d %s", rec.Code, rec.Body)
	}
	if code := approve(t, wb, strings.ToLower(strings.ReplaceAll(user, "-", "")), "approve"); code != http.StatusOK {
		t.Fatalf("approve: %d", code)
	}
	status, token := devicePoll(t, wb, device)
	if status != http.StatusOK {
		t.Fatalf("poll once approved: %d %s", status, token)
	}
	r = httptest.NewRequest("GET", "/", nil)
	r.Header.Set("Authorization", "Bearer "+token)
	if p, ok, err := people.Authenticate(r); !ok || err != nil || p.Name != "alice" {
		t.Errorf("the device token is %+v %v %v; want alice's", p, ok, err)
	}
	if _, got := devicePoll(t, wb, device); got != "invalid_grant" {
		t.Errorf("a used device code: %s, want invalid_grant", got)
	}

	denied, user := deviceStart(t, wb)
	approve(t, wb, user, "deny")
	if _, got := devicePoll(t, wb, denied); got != "access_denied" {
		t.Errorf("a refused code: %s, want access_denied", got)
	}
	late, _ := deviceStart(t, wb)
	clk.Step(deviceTTL)
	if _, got := devicePoll(t, wb, late); got != "expired_token" && got != "invalid_grant" {
		t.Errorf("an expired code: %s, want expired_token", got)
	}
}

// TestDeviceLockout: after maxWrongCodes wrong user codes, even the right
// one is refused until the lockout ends.
func TestDeviceLockout(t *testing.T) {
	wb, _, clk := cliWeb(t)
	device, user := deviceStart(t, wb)
	for range maxWrongCodes {
		if code := approve(t, wb, "BBBB-BBBB", "approve"); code != http.StatusBadRequest {
			t.Fatalf("a wrong code: %d, want 400", code)
		}
	}
	if code := approve(t, wb, user, "approve"); code != http.StatusTooManyRequests {
		t.Fatalf("the right code once locked out: %d, want 429", code)
	}
	if _, got := devicePoll(t, wb, device); got != "authorization_pending" {
		t.Errorf("poll: %s, want authorization_pending", got)
	}
	clk.Step(deviceLockout)
	device, user = deviceStart(t, wb)
	if code := approve(t, wb, user, "approve"); code != http.StatusOK {
		t.Errorf("after the lockout: %d, want 200", code)
	}
	if status, _ := devicePoll(t, wb, device); status != http.StatusOK {
		t.Errorf("poll after approval: %d", status)
	}
}

// TestDeviceStartsBoundedPerAddress: one client address can't take every
// place for pending device sign-ins; another address still gets a code,
// and places come back as the grants expire.
func TestDeviceStartsBoundedPerAddress(t *testing.T) {
	wb, _, clk := cliWeb(t)
	start := func(addr string) (int, string) {
		r := httptest.NewRequest("POST", "/api/login/device", nil)
		r.RemoteAddr = addr
		rec := httptest.NewRecorder()
		wb.ServeDeviceStart(rec, r)
		var e struct{ Error string }
		json.Unmarshal(rec.Body.Bytes(), &e)
		return rec.Code, e.Error
	}
	for i := range maxDeviceGrantsPerAddress {
		if code, _ := start(fmt.Sprintf("192.0.2.7:%d", 40000+i)); code != http.StatusOK {
			t.Fatalf("start %d from one address: %d", i, code)
		}
	}
	if code, e := start("192.0.2.7:50000"); code != http.StatusServiceUnavailable || e != "temporarily_unavailable" {
		t.Errorf("one more from the same address (another port): %d %q, want 503 temporarily_unavailable", code, e)
	}
	if code, _ := start("198.51.100.9:40000"); code != http.StatusOK {
		t.Errorf("a start from another address: %d, want 200", code)
	}
	clk.Step(deviceTTL)
	if code, _ := start("192.0.2.7:50001"); code != http.StatusOK {
		t.Errorf("from the first address once its grants expired: %d, want 200", code)
	}
}
