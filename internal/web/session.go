package web

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"golang.org/x/oauth2"

	"github.com/tetherhq/tether/internal/auth"
)

// SessionCookie holds a signed-in browser's hub-issued token. It is taken
// by the page and /api/*, never by /clusters/ (SPEC section 3). A token
// longer than sessionPiece, a person's groups are in it, goes in pieces:
// tether_session, then tether_session_1 and on, up to maxSessionPieces, as
// browsers drop a cookie over 4 KiB without a word.
const SessionCookie = "tether_session"

const (
	sessionPiece = 3800
	// maxSessionPieces: an ingress takes about 8 KiB of Cookie header by
	// default; past this the page asks for a kubeconfig instead.
	maxSessionPieces = 4
)

// sessionCookieName names the i-th piece of the session cookie.
func (wb *Web) sessionCookieName(r *http.Request, i int) string {
	if i == 0 {
		return wb.cookieName(r, SessionCookie)
	}
	return wb.cookieName(r, SessionCookie+"_"+strconv.Itoa(i))
}

// sessionToken joins the session cookie's pieces.
func (wb *Web) sessionToken(r *http.Request) string {
	var b strings.Builder
	for i := range maxSessionPieces {
		c, err := r.Cookie(wb.sessionCookieName(r, i))
		if err != nil || c.Value == "" {
			break
		}
		b.WriteString(c.Value)
	}
	return b.String()
}

// cookiePerson authenticates r by its bearer token or proxy headers, and
// else by its session cookie.
func (wb *Web) cookiePerson(r *http.Request) (auth.Person, bool, error) {
	p, ok, err := wb.cfg.Auth.Authenticate(r)
	if ok || err != nil {
		return p, ok, err
	}
	return wb.sessionPerson(r)
}

// sessionPerson authenticates r by its session cookie alone.
func (wb *Web) sessionPerson(r *http.Request) (auth.Person, bool, error) {
	token := wb.sessionToken(r)
	if token == "" {
		return auth.Person{}, false, nil
	}
	r2 := r.Clone(r.Context())
	r2.Header = http.Header{"Authorization": {"Bearer " + token}}
	return wb.cfg.Auth.Authenticate(r2)
}

// ServeLogin takes the sign-in form: a static token, checked like a bearer
// token, answered with a session cookie holding a hub-issued token.
func (wb *Web) ServeLogin(w http.ResponseWriter, r *http.Request) {
	if wb.refuseOtherSites(w, r) {
		return
	}
	// A token, even an OIDC ID token, is a few KiB: no one signed in yet
	// gets the hub to read megabytes.
	r.Body = http.MaxBytesReader(w, r.Body, maxLoginForm)
	// Nor to wait for a form that never comes: the server has no read
	// deadline of its own (kubeproxy.CloseUnreadBodies). Once the form is read, the
	// deadline goes, or it would end the request's context when it passed.
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(wb.cfg.FormTimeout))
	if r.ParseForm() == nil {
		rc.SetReadDeadline(time.Time{})
	}
	token := strings.TrimSpace(r.PostFormValue("token"))
	r2 := r.Clone(r.Context())
	r2.Header = http.Header{"Authorization": {"Bearer " + token}}
	p, ok, err := wb.cfg.Auth.Authenticate(r2)
	if err != nil || !ok || token == "" {
		if err != nil {
			wb.cfg.Proxy.LogAuthFailure(r, err)
		}
		if refusedIdentity(err) {
			wb.renderLogin(w, r, err.Error(), http.StatusForbidden)
			return
		}
		wb.renderLogin(w, r, "That token isn't one this hub knows.", http.StatusUnauthorized)
		return
	}
	wb.startSession(w, r, p, wb.returnTo(r.PostFormValue("next")))
}

// returnTo is where a sign-in sends the browser: next, the page it was
// asked for, when that is a cluster's page; else the fleet page. Nothing
// else passes, so the form can't send anyone to another site.
func (wb *Web) returnTo(next string) string {
	base := wb.pageBase()
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.RawQuery != "" || strings.ContainsAny(next, "\\\r\n") {
		return base
	}
	// Cleaned, so that no /../ climbs out of it and no // names a host;
	// and only a cluster's page: the fleet page is the default anyway.
	// A `tether login` sign-in comes back to its page (clilogin.go, device.go).
	if p := path.Clean("/" + u.Path); strings.HasPrefix(p, base+"cluster/") || p == base+cliLoginPage || p == base+devicePage {
		// Escaped again: u.Path is decoded, and a Location header must
		// not carry what %00 or %5C stood for.
		return (&url.URL{Path: p}).EscapedPath()
	}
	return base
}

// maxLoginForm bounds the sign-in form's body.
const maxLoginForm = 64 << 10

// startSession gives the browser a session cookie holding a session token
// for p, and sends it to the fleet page. A person who signed in with a
// kubeconfig's token gets a session that expires with it: no token makes a
// longer-lived one.
func (wb *Web) startSession(w http.ResponseWriter, r *http.Request, p auth.Person, next string) {
	session, expires, err := wb.cfg.Auth.IssueSession(p)
	if errors.Is(err, auth.ErrExpired) {
		wb.renderLogin(w, r, "That token has expired: get a new kubeconfig, or sign in another way.", http.StatusUnauthorized)
		return
	}
	if err != nil {
		http.Error(w, "The hub can't sign a session now.", http.StatusInternalServerError)
		return
	}
	n := (len(session) + sessionPiece - 1) / sessionPiece
	if n > maxSessionPieces {
		wb.renderLogin(w, r, fmt.Sprintf("You are in too many groups (%d) for a browser to hold your session; a kubeconfig from %sapi/kubeconfig works.",
			len(p.Groups), wb.pageBase()), http.StatusBadRequest)
		return
	}
	for i := range maxSessionPieces {
		c := wb.sessionCookiePiece(r, i)
		if i < n {
			c.Value, c.Expires = session[i*sessionPiece:min((i+1)*sessionPiece, len(session))], expires
		} else if _, err := r.Cookie(c.Name); err == nil {
			c.MaxAge = -1 // a piece of a longer session before this one
		} else {
			continue
		}
		http.SetCookie(w, c)
	}
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// sessionCookiePiece is the i-th piece of the session cookie, without its
// value.
func (wb *Web) sessionCookiePiece(r *http.Request, i int) *http.Cookie {
	return wb.cookie(r, wb.sessionCookieName(r, i))
}

// ServeLogout ends the browser's session: the cookie is cleared, and its
// token, which anyone who copied it could still send, stops working
// (auth.EndSessions).
func (wb *Web) ServeLogout(w http.ResponseWriter, r *http.Request) {
	if wb.refuseOtherSites(w, r) {
		return
	}
	if p, ok, err := wb.sessionPerson(r); ok && err == nil {
		wb.cfg.Auth.EndSessions(p)
		// The page's event streams, and anything else the session's
		// token holds open, end now.
		wb.cfg.Proxy.SignedOut(p.Name)
	}
	for i := range maxSessionPieces {
		if _, err := r.Cookie(wb.sessionCookieName(r, i)); err == nil || i == 0 {
			c := wb.sessionCookiePiece(r, i)
			c.MaxAge = -1
			http.SetCookie(w, c)
		}
	}
	http.Redirect(w, r, wb.pageBase(), http.StatusSeeOther)
}

// oidcCookie carries one browser sign-in's state, nonce and PKCE verifier
// from /login/oidc to its callback, and the page to return to. They are the
// hub's own random secrets, good for one sign-in and ten minutes.
const oidcCookie = "tether_oidc"

func (wb *Web) oidcRedirectURL() string {
	return strings.TrimSuffix(wb.cfg.PublicURL, "/") + "/login/oidc/callback"
}

// ServeOIDCLogin sends the browser to the issuer.
func (wb *Web) ServeOIDCLogin(w http.ResponseWriter, r *http.Request) {
	state, nonce, verifier := randomText(), randomText(), oauth2.GenerateVerifier()
	target, err := wb.cfg.Auth.OIDCAuthCodeURL(r.Context(), wb.oidcRedirectURL(), state, nonce, verifier)
	if err != nil {
		wb.log.Warn("Can't start an OIDC sign-in", "err", err)
		wb.renderLogin(w, r, "The identity provider can't be reached now; try again in a moment.", http.StatusServiceUnavailable)
		return
	}
	next := base64.RawURLEncoding.EncodeToString([]byte(wb.returnTo(r.URL.Query().Get("next"))))
	c := wb.cookie(r, wb.cookieName(r, oidcCookie))
	c.Value, c.MaxAge = state+"."+nonce+"."+verifier+"."+next, 600
	http.SetCookie(w, c)
	http.Redirect(w, r, target, http.StatusFound)
}

// ServeOIDCCallback finishes a sign-in: the state must be this browser's,
// and the code is traded, with the verifier, for an ID token.
func (wb *Web) ServeOIDCCallback(w http.ResponseWriter, r *http.Request) {
	name := wb.cookieName(r, oidcCookie)
	parts := []string{}
	if c, err := r.Cookie(name); err == nil {
		parts = strings.Split(c.Value, ".")
	}
	gone := wb.cookie(r, name)
	gone.MaxAge = -1
	http.SetCookie(w, gone)
	if len(parts) != 4 || r.URL.Query().Get("state") != parts[0] {
		wb.renderLogin(w, r, "That sign-in didn't start here, or took too long; try again.", http.StatusBadRequest)
		return
	}
	if e := r.URL.Query().Get("error"); e != "" {
		wb.renderLogin(w, r, "The identity provider said: "+e, http.StatusUnauthorized)
		return
	}
	p, err := wb.cfg.Auth.OIDCExchange(r.Context(), wb.oidcRedirectURL(), r.URL.Query().Get("code"), parts[2], parts[1])
	if err != nil {
		wb.cfg.Proxy.LogAuthFailure(r, err)
		if refusedIdentity(err) {
			wb.renderLogin(w, r, err.Error(), http.StatusForbidden)
			return
		}
		wb.renderLogin(w, r, "The identity provider's answer wasn't accepted; try again.", http.StatusUnauthorized)
		return
	}
	next, _ := base64.RawURLEncoding.DecodeString(parts[3])
	wb.startSession(w, r, p, wb.returnTo(string(next)))
}

// secureCookies says whether the hub's cookies must go over HTTPS only:
// when the hub serves HTTPS itself, and when people open it at an https
// address with TLS ended in front of it (an ingress), where the request the
// hub sees is plain but the browser's is not. A cookie without Secure there
// would also go out over plain http to the same host, where anyone on the
// way could read it: it is a hub token, good for TETHER_KUBECONFIG_TTL.
func (wb *Web) secureCookies(r *http.Request) bool {
	return r.TLS != nil || strings.HasPrefix(wb.cfg.PublicURL, "https://")
}

// cookieName is what the hub's cookie name goes by. Over HTTPS it takes a
// prefix browsers enforce, so nobody can plant a cookie of the name (a
// session of their own, or a sign-in's state): a __Secure- cookie is set
// only by an https answer, so not by someone on the network answering for
// plain http to the same host; a __Host- one only by this host itself, not
// by a sibling under the same domain. __Host- needs Path=/, so a hub under
// a base path, which shares its host, gets __Secure-. Over plain http
// (tether dev) browsers take neither.
func (wb *Web) cookieName(r *http.Request, name string) string {
	switch {
	case !wb.secureCookies(r):
		return name
	case wb.pageBase() == "/":
		return "__Host-" + name
	default:
		return "__Secure-" + name
	}
}

// cookie is the hub's cookie of that name, without a value: for the
// page's paths, sent by the browser only to the hub itself, never to
// scripts or other sites' forms.
func (wb *Web) cookie(r *http.Request, name string) *http.Cookie {
	return &http.Cookie{Name: name, Path: wb.pageBase(), HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: wb.secureCookies(r)}
}

// randomText is 128 random bits as hex, for an OIDC state or nonce.
func randomText() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
