package web

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/tetherhq/tether/internal/auth"
)

// `tether login`'s browser sign-in (decision 038): the command opens
// GET /login/cli with a loopback redirect URI and a PKCE challenge; the
// person signs in to the page as they always do; the hub sends the
// browser back to the loopback listener with a one-time code, which the
// command trades, with its PKCE verifier, at POST /api/login/token for a
// hub-issued token. The OIDC issuer sees only the page's own sign-in: it
// needs no new redirect URI.

const (
	// cliLoginPage is GET /login/cli's path below the base path.
	cliLoginPage = "login/cli"
	// cliCookie keeps a /login/cli request across the page's sign-in.
	cliCookie = "tether_cli"
	// cliCodeTTL is how long a code holds: the browser hands it to the
	// command at once.
	cliCodeTTL = 60 * time.Second
	// sealCLICode is what codes are sealed for (auth.Seal).
	sealCLICode = "cli-code"
	// maxUsedCodes bounds the codes a replica remembers as used: past it,
	// no code is redeemed until some expire.
	maxUsedCodes = 10000
	// maxCLIRequest bounds /login/cli's query and the token form.
	maxCLIRequest = 8 << 10
)

// cliRequest is what GET /login/cli is asked.
type cliRequest struct {
	RedirectURI string
	Challenge   string
	State       string
}

// parseCLIRequest checks a /login/cli query: a loopback redirect URI
// (RFC 8252 section 7.3), an S256 PKCE challenge (RFC 7636), and a state.
func parseCLIRequest(q url.Values) (cliRequest, error) {
	req := cliRequest{RedirectURI: q.Get("redirect_uri"), Challenge: q.Get("code_challenge"), State: q.Get("state")}
	if err := checkLoopback(req.RedirectURI); err != nil {
		return cliRequest{}, err
	}
	if m := q.Get("code_challenge_method"); m != "S256" {
		return cliRequest{}, fmt.Errorf("code_challenge_method must be S256, not %q", cut(m, 20))
	}
	if len(req.Challenge) != 43 || !pkceChars(req.Challenge) {
		return cliRequest{}, errors.New("code_challenge must be the 43-character base64url SHA-256 of the verifier")
	}
	if req.State == "" || len(req.State) > 512 || !pkceChars(req.State) {
		return cliRequest{}, errors.New("state must be 1 to 512 characters of A-Z a-z 0-9 - . _ ~")
	}
	return req, nil
}

// checkLoopback accepts only an http URL on this computer's loopback
// (127.0.0.1, [::1], localhost), any port: where only the command that
// asked listens, so the code goes to no one else.
func checkLoopback(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" || u.User != nil || u.Fragment != "" || u.Opaque != "" {
		return fmt.Errorf("redirect_uri %q must be an http://127.0.0.1:PORT/ address", cut(raw, 100))
	}
	switch h := u.Hostname(); h {
	case "127.0.0.1", "::1", "localhost":
	default:
		return fmt.Errorf("redirect_uri must be on this computer's loopback (127.0.0.1, [::1] or localhost), not %q", cut(h, 100))
	}
	if p := u.Port(); p != "" {
		if _, err := net.LookupPort("tcp", p); err != nil || strings.TrimLeft(p, "0123456789") != "" {
			return fmt.Errorf("redirect_uri's port %q is not a number", cut(p, 20))
		}
	}
	return nil
}

// pkceChars says whether s holds only RFC 7636's unreserved characters.
func pkceChars(s string) bool {
	for _, c := range []byte(s) {
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~') {
			return false
		}
	}
	return true
}

// cut shortens text someone sent before it goes into an answer.
func cut(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// cliCode is what a one-time code holds, sealed: the token it is traded
// for, made when the person was signed in, and what the trade must show.
type cliCode struct {
	Token       string    `json:"t"`
	Expiry      time.Time `json:"e"`
	Challenge   string    `json:"c"`
	RedirectURI string    `json:"r"`
	Until       time.Time `json:"u"`
}

// ServeCLILogin answers GET /login/cli: a signed-in person's browser is
// sent to the command's loopback listener with a one-time code; anyone
// else signs in first, on the page, and comes back here.
func (wb *Web) ServeCLILogin(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'")
	if auth.FromOtherSite(r, wb.cfg.PublicURL, true) {
		http.Error(w, "Requests from other sites are refused.", http.StatusForbidden)
		return
	}
	query := r.URL.RawQuery
	name := wb.cookieName(r, cliCookie)
	if query == "" {
		// Back from the page's sign-in.
		if c, err := r.Cookie(name); err == nil {
			query = c.Value
		}
	}
	if len(query) > maxCLIRequest {
		http.Error(w, "That sign-in request is too long.", http.StatusRequestURITooLong)
		return
	}
	q, err := url.ParseQuery(query)
	var req cliRequest
	if err == nil {
		req, err = parseCLIRequest(q)
	}
	if err != nil {
		http.Error(w, "This page signs in tether login, and it was opened with a request it can't take: "+err.Error()+
			". Run tether login again.", http.StatusBadRequest)
		return
	}
	p, ok, err := wb.cookiePerson(r)
	if err != nil {
		wb.cfg.Proxy.LogAuthFailure(r, err)
	}
	if !ok || err != nil {
		c := wb.cookie(r, name)
		// What was checked, written anew: nothing else rides along.
		c.Value = url.Values{"redirect_uri": {req.RedirectURI}, "code_challenge": {req.Challenge},
			"code_challenge_method": {"S256"}, "state": {req.State}}.Encode()
		c.MaxAge = 600
		http.SetCookie(w, c)
		msg := "Sign in, and tether login will be signed in as you."
		if refusedIdentity(err) {
			wb.renderLogin(w, r, err.Error(), http.StatusForbidden)
			return
		}
		r2 := r.Clone(r.Context())
		r2.URL.RawQuery = ""
		wb.renderLogin(w, r2, msg, http.StatusUnauthorized)
		return
	}
	gone := wb.cookie(r, name)
	gone.MaxAge = -1
	http.SetCookie(w, gone)
	target, err := url.Parse(req.RedirectURI)
	if err != nil { // parseCLIRequest parsed it
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	back := target.Query()
	back.Set("state", req.State)
	token, expiry, err := wb.cfg.Auth.IssueToken(p)
	if errors.Is(err, auth.ErrExpired) {
		wb.renderLogin(w, r, "Your session has expired: sign in again.", http.StatusUnauthorized)
		return
	}
	if err != nil {
		wb.log.Error("Can't sign a token for tether login", "user", p.Name, "err", err)
		http.Error(w, "The hub can't sign a token now.", http.StatusInternalServerError)
		return
	}
	plain, _ := json.Marshal(cliCode{Token: token, Expiry: expiry, Challenge: req.Challenge, RedirectURI: req.RedirectURI,
		Until: wb.now().Add(cliCodeTTL)})
	code, err := wb.cfg.Auth.Seal(sealCLICode, plain)
	if err != nil {
		http.Error(w, "The hub can't seal a code now.", http.StatusInternalServerError)
		return
	}
	back.Set("code", code)
	target.RawQuery = back.Encode()
	wb.log.Info("Signed in tether login", "user", p.Name)
	http.Redirect(w, r, target.String(), http.StatusFound)
}

// now is the hub's clock.
func (wb *Web) now() time.Time { return wb.cfg.Clock.Now() }

// tokenRequest is a POST /api/login/token form.
type tokenRequest struct {
	GrantType, Code, Verifier, RedirectURI, DeviceCode string
}

const (
	grantCode   = "authorization_code"
	grantDevice = "urn:ietf:params:oauth:grant-type:device_code"
)

// parseTokenRequest checks a token request's form (RFC 6749 section 4.1.3,
// RFC 8628 section 3.4). Its error is an OAuth error code and a description.
func parseTokenRequest(form url.Values) (tokenRequest, *oauthError) {
	req := tokenRequest{GrantType: form.Get("grant_type"), Code: form.Get("code"), Verifier: form.Get("code_verifier"),
		RedirectURI: form.Get("redirect_uri"), DeviceCode: form.Get("device_code")}
	switch req.GrantType {
	case grantCode:
		if req.Code == "" || req.RedirectURI == "" {
			return req, &oauthError{"invalid_request", "code and redirect_uri are needed"}
		}
		if len(req.Verifier) < 43 || len(req.Verifier) > 128 || !pkceChars(req.Verifier) {
			return req, &oauthError{"invalid_request", "code_verifier must be 43 to 128 characters of A-Z a-z 0-9 - . _ ~"}
		}
	case grantDevice:
		if req.DeviceCode == "" {
			return req, &oauthError{"invalid_request", "device_code is needed"}
		}
	default:
		return req, &oauthError{"unsupported_grant_type", fmt.Sprintf("grant_type %q is not one this hub takes", cut(req.GrantType, 60))}
	}
	return req, nil
}

// oauthError is an RFC 6749 section 5.2 error.
type oauthError struct {
	Code        string `json:"error"`
	Description string `json:"error_description,omitempty"`
}

// tokenAnswer is a token endpoint's answer.
type tokenAnswer struct {
	Token     string    `json:"access_token"`
	TokenType string    `json:"token_type"`
	Expiry    time.Time `json:"expiry"`
	ExpiresIn int64     `json:"expires_in"`
}

// ServeLoginToken answers POST /api/login/token: a code from /login/cli,
// with its verifier, or a device code (device.go), traded for a hub-issued
// token.
func (wb *Web) ServeLoginToken(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	r.Body = http.MaxBytesReader(w, r.Body, maxCLIRequest)
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(wb.cfg.FormTimeout))
	if err := r.ParseForm(); err != nil {
		wb.oauthFail(w, http.StatusBadRequest, &oauthError{"invalid_request", "the form can't be read"})
		return
	}
	rc.SetReadDeadline(time.Time{})
	req, oerr := parseTokenRequest(r.PostForm)
	if oerr != nil {
		wb.oauthFail(w, http.StatusBadRequest, oerr)
		return
	}
	if req.GrantType == grantDevice {
		if wb.devicePollForwarded(w, r, req.DeviceCode) {
			return
		}
		wb.redeemDevice(w, req.DeviceCode)
		return
	}
	plain, err := wb.cfg.Auth.Open(sealCLICode, req.Code)
	var code cliCode
	if err == nil {
		err = json.Unmarshal(plain, &code)
	}
	now := wb.now()
	switch {
	case err != nil:
		wb.oauthFail(w, http.StatusBadRequest, &oauthError{"invalid_grant", "that code isn't one this hub made"})
		return
	case !now.Before(code.Until):
		wb.oauthFail(w, http.StatusBadRequest, &oauthError{"invalid_grant", "that code has expired: run tether login again"})
		return
	case code.RedirectURI != req.RedirectURI:
		wb.oauthFail(w, http.StatusBadRequest, &oauthError{"invalid_grant", "redirect_uri isn't the one the code was made for"})
		return
	}
	sum := sha256.Sum256([]byte(req.Verifier))
	if subtle.ConstantTimeCompare([]byte(base64.RawURLEncoding.EncodeToString(sum[:])), []byte(code.Challenge)) != 1 {
		wb.oauthFail(w, http.StatusBadRequest, &oauthError{"invalid_grant", "code_verifier doesn't match the code's challenge"})
		return
	}
	if err := wb.usedCodes().use(req.Code, code.Until, now); err != nil {
		wb.oauthFail(w, http.StatusBadRequest, &oauthError{"invalid_grant", err.Error()})
		return
	}
	wb.answerToken(w, code.Token, code.Expiry)
}

func (wb *Web) answerToken(w http.ResponseWriter, token string, expiry time.Time) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(tokenAnswer{Token: token, TokenType: "Bearer", Expiry: expiry.UTC(),
		ExpiresIn: int64(max(0, expiry.Sub(wb.now()).Seconds()))})
}

func (wb *Web) oauthFail(w http.ResponseWriter, status int, e *oauthError) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(e)
}

// usedCodes is the replica's set of codes redeemed, made on first use.
func (wb *Web) usedCodes() *usedCodes {
	wb.cliOnce.Do(func() {
		wb.cli = &cliState{used: usedCodes{seen: map[[32]byte]time.Time{}},
			devices: devices{byCode: map[string]*deviceGrant{}, byUser: map[string]string{}, wrong: map[string]wrongCodes{}}}
	})
	return &wb.cli.used
}

// cliState is what the sign-ins of `tether login` keep on a replica.
type cliState struct {
	used    usedCodes
	devices devices
}

// usedCodes remembers the codes redeemed here until they expire, so each
// is redeemed once. A code redeemed at another replica is not known here:
// it holds 60 s, and a code is only sent to the command's loopback.
type usedCodes struct {
	mu   sync.Mutex
	seen map[[32]byte]time.Time // by the code's SHA-256, until it expires
}

var errCodeUsed = errors.New("that code has been used")

// use marks code used until until, or says it was.
func (u *usedCodes) use(code string, until, now time.Time) error {
	key := sha256.Sum256([]byte(code))
	u.mu.Lock()
	defer u.mu.Unlock()
	if _, ok := u.seen[key]; ok {
		return errCodeUsed
	}
	if len(u.seen) >= maxUsedCodes {
		for k, t := range u.seen {
			if !now.Before(t) {
				delete(u.seen, k)
			}
		}
		if len(u.seen) >= maxUsedCodes {
			return errors.New("the hub is taking too many sign-ins at once: try again in a minute")
		}
	}
	u.seen[key] = until
	return nil
}
