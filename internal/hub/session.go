package hub

import (
	"encoding/base64"
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

// sessionCookie holds a signed-in browser's hub-issued token. It is taken
// by the page and /api/*, never by /clusters/ (SPEC section 3). A token
// longer than sessionPiece, a person's groups are in it, goes in pieces:
// tether_session, then tether_session_1 and on, up to maxSessionPieces, as
// browsers drop a cookie over 4 KiB without a word.
const sessionCookie = "tether_session"

const (
	sessionPiece = 3800
	// maxSessionPieces: an ingress takes about 8 KiB of Cookie header by
	// default; past this the page asks for a kubeconfig instead.
	maxSessionPieces = 4
)

// sessionCookieName names the i-th piece of the session cookie.
func (h *Hub) sessionCookieName(r *http.Request, i int) string {
	if i == 0 {
		return h.cookieName(r, sessionCookie)
	}
	return h.cookieName(r, sessionCookie+"_"+strconv.Itoa(i))
}

// sessionToken joins the session cookie's pieces.
func (h *Hub) sessionToken(r *http.Request) string {
	var b strings.Builder
	for i := range maxSessionPieces {
		c, err := r.Cookie(h.sessionCookieName(r, i))
		if err != nil || c.Value == "" {
			break
		}
		b.WriteString(c.Value)
	}
	return b.String()
}

// cookiePerson authenticates r by its bearer token or proxy headers, and
// else by its session cookie.
func (h *Hub) cookiePerson(r *http.Request) (auth.Person, bool, error) {
	p, ok, err := h.cfg.Auth.Authenticate(r)
	if ok || err != nil {
		return p, ok, err
	}
	return h.sessionPerson(r)
}

// sessionPerson authenticates r by its session cookie alone.
func (h *Hub) sessionPerson(r *http.Request) (auth.Person, bool, error) {
	token := h.sessionToken(r)
	if token == "" {
		return auth.Person{}, false, nil
	}
	r2 := r.Clone(r.Context())
	r2.Header = http.Header{"Authorization": {"Bearer " + token}}
	return h.cfg.Auth.Authenticate(r2)
}

// serveLogin takes the sign-in form: a static token, checked like a bearer
// token, answered with a session cookie holding a hub-issued token.
func (h *Hub) serveLogin(w http.ResponseWriter, r *http.Request) {
	if h.refuseOtherSites(w, r) {
		return
	}
	// A token, even an OIDC ID token, is a few KiB: no one signed in yet
	// gets the hub to read megabytes.
	r.Body = http.MaxBytesReader(w, r.Body, maxLoginForm)
	// Nor to wait for a form that never comes: the server has no read
	// deadline of its own (closeUnreadBodies). Once the form is read, the
	// deadline goes, or it would end the request's context when it passed.
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(h.cfg.FormTimeout))
	if r.ParseForm() == nil {
		rc.SetReadDeadline(time.Time{})
	}
	token := strings.TrimSpace(r.PostFormValue("token"))
	r2 := r.Clone(r.Context())
	r2.Header = http.Header{"Authorization": {"Bearer " + token}}
	p, ok, err := h.cfg.Auth.Authenticate(r2)
	if err != nil || !ok || token == "" {
		if err != nil {
			h.logAuthFailure(r, err)
		}
		if refusedIdentity(err) {
			h.renderLogin(w, r, err.Error(), http.StatusForbidden)
			return
		}
		h.renderLogin(w, r, "That token isn't one this hub knows.", http.StatusUnauthorized)
		return
	}
	h.startSession(w, r, p, h.returnTo(r.PostFormValue("next")))
}

// returnTo is where a sign-in sends the browser: next, the page it was
// asked for, when that is a cluster's page; else the fleet page. Nothing
// else passes, so the form can't send anyone to another site.
func (h *Hub) returnTo(next string) string {
	base := h.pageBase()
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.RawQuery != "" || strings.ContainsAny(next, "\\\r\n") {
		return base
	}
	// Cleaned, so that no /../ climbs out of it and no // names a host;
	// and only a cluster's page: the fleet page is the default anyway.
	if p := path.Clean("/" + u.Path); strings.HasPrefix(p, base+"cluster/") {
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
func (h *Hub) startSession(w http.ResponseWriter, r *http.Request, p auth.Person, next string) {
	session, expires, err := h.cfg.Auth.IssueSession(p)
	if errors.Is(err, auth.ErrExpired) {
		h.renderLogin(w, r, "That token has expired: get a new kubeconfig, or sign in another way.", http.StatusUnauthorized)
		return
	}
	if err != nil {
		http.Error(w, "The hub can't sign a session now.", http.StatusInternalServerError)
		return
	}
	n := (len(session) + sessionPiece - 1) / sessionPiece
	if n > maxSessionPieces {
		h.renderLogin(w, r, fmt.Sprintf("You are in too many groups (%d) for a browser to hold your session; a kubeconfig from %sapi/kubeconfig works.",
			len(p.Groups), h.pageBase()), http.StatusBadRequest)
		return
	}
	for i := range maxSessionPieces {
		c := h.sessionCookiePiece(r, i)
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
func (h *Hub) sessionCookiePiece(r *http.Request, i int) *http.Cookie {
	return h.cookie(r, h.sessionCookieName(r, i))
}

// serveLogout ends the browser's session: the cookie is cleared, and its
// token, which anyone who copied it could still send, stops working
// (auth.EndSessions).
func (h *Hub) serveLogout(w http.ResponseWriter, r *http.Request) {
	if h.refuseOtherSites(w, r) {
		return
	}
	if p, ok, err := h.sessionPerson(r); ok && err == nil {
		h.cfg.Auth.EndSessions(p)
		// The page's event streams, and anything else the session's
		// token holds open, end now.
		h.recheckOpen(func(o *openRequest) bool { return o.person.Name == p.Name })
	}
	for i := range maxSessionPieces {
		if _, err := r.Cookie(h.sessionCookieName(r, i)); err == nil || i == 0 {
			c := h.sessionCookiePiece(r, i)
			c.MaxAge = -1
			http.SetCookie(w, c)
		}
	}
	http.Redirect(w, r, h.pageBase(), http.StatusSeeOther)
}

// oidcCookie carries one browser sign-in's state, nonce and PKCE verifier
// from /login/oidc to its callback, and the page to return to. They are the
// hub's own random secrets, good for one sign-in and ten minutes.
const oidcCookie = "tether_oidc"

func (h *Hub) oidcRedirectURL() string {
	return strings.TrimSuffix(h.cfg.PublicURL, "/") + "/login/oidc/callback"
}

// serveOIDCLogin sends the browser to the issuer.
func (h *Hub) serveOIDCLogin(w http.ResponseWriter, r *http.Request) {
	state, nonce, verifier := newRequestID(), newRequestID(), oauth2.GenerateVerifier()
	target, err := h.cfg.Auth.OIDCAuthCodeURL(r.Context(), h.oidcRedirectURL(), state, nonce, verifier)
	if err != nil {
		h.log.Warn("Can't start an OIDC sign-in", "err", err)
		h.renderLogin(w, r, "The identity provider can't be reached now; try again in a moment.", http.StatusServiceUnavailable)
		return
	}
	next := base64.RawURLEncoding.EncodeToString([]byte(h.returnTo(r.URL.Query().Get("next"))))
	c := h.cookie(r, h.cookieName(r, oidcCookie))
	c.Value, c.MaxAge = state+"."+nonce+"."+verifier+"."+next, 600
	http.SetCookie(w, c)
	http.Redirect(w, r, target, http.StatusFound)
}

// serveOIDCCallback finishes a sign-in: the state must be this browser's,
// and the code is traded, with the verifier, for an ID token.
func (h *Hub) serveOIDCCallback(w http.ResponseWriter, r *http.Request) {
	name := h.cookieName(r, oidcCookie)
	parts := []string{}
	if c, err := r.Cookie(name); err == nil {
		parts = strings.Split(c.Value, ".")
	}
	gone := h.cookie(r, name)
	gone.MaxAge = -1
	http.SetCookie(w, gone)
	if len(parts) != 4 || r.URL.Query().Get("state") != parts[0] {
		h.renderLogin(w, r, "That sign-in didn't start here, or took too long; try again.", http.StatusBadRequest)
		return
	}
	if e := r.URL.Query().Get("error"); e != "" {
		h.renderLogin(w, r, "The identity provider said: "+e, http.StatusUnauthorized)
		return
	}
	p, err := h.cfg.Auth.OIDCExchange(r.Context(), h.oidcRedirectURL(), r.URL.Query().Get("code"), parts[2], parts[1])
	if err != nil {
		h.logAuthFailure(r, err)
		if refusedIdentity(err) {
			h.renderLogin(w, r, err.Error(), http.StatusForbidden)
			return
		}
		h.renderLogin(w, r, "The identity provider's answer wasn't accepted; try again.", http.StatusUnauthorized)
		return
	}
	next, _ := base64.RawURLEncoding.DecodeString(parts[3])
	h.startSession(w, r, p, h.returnTo(string(next)))
}

// secureCookies says whether the hub's cookies must go over HTTPS only:
// when the hub serves HTTPS itself, and when people open it at an https
// address with TLS ended in front of it (an ingress), where the request the
// hub sees is plain but the browser's is not. A cookie without Secure there
// would also go out over plain http to the same host, where anyone on the
// way could read it: it is a hub token, good for TETHER_KUBECONFIG_TTL.
func (h *Hub) secureCookies(r *http.Request) bool {
	return r.TLS != nil || strings.HasPrefix(h.cfg.PublicURL, "https://")
}

// cookieName is what the hub's cookie name goes by. Over HTTPS it takes a
// prefix browsers enforce, so nobody can plant a cookie of the name (a
// session of their own, or a sign-in's state): a __Secure- cookie is set
// only by an https answer, so not by someone on the network answering for
// plain http to the same host; a __Host- one only by this host itself, not
// by a sibling under the same domain. __Host- needs Path=/, so a hub under
// a base path, which shares its host, gets __Secure-. Over plain http
// (tether dev) browsers take neither.
func (h *Hub) cookieName(r *http.Request, name string) string {
	switch {
	case !h.secureCookies(r):
		return name
	case h.pageBase() == "/":
		return "__Host-" + name
	default:
		return "__Secure-" + name
	}
}

// cookie is the hub's cookie of that name, without a value: for the
// page's paths, sent by the browser only to the hub itself, never to
// scripts or other sites' forms.
func (h *Hub) cookie(r *http.Request, name string) *http.Cookie {
	return &http.Cookie{Name: name, Path: h.pageBase(), HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: h.secureCookies(r)}
}
