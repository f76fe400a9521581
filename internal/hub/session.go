package hub

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/tetherhq/tether/internal/auth"
)

// sessionCookie holds a signed-in browser's hub-issued token. It is taken
// by the page and /api/*, never by /clusters/ (SPEC section 3).
const sessionCookie = "tether_session"

// cookiePerson authenticates r by its bearer token or proxy headers, and
// else by its session cookie. It returns the token the cookie held, if that
// is what signed the person in.
func (h *Hub) cookiePerson(r *http.Request) (p auth.Person, session string, ok bool, err error) {
	p, ok, err = h.cfg.Auth.Authenticate(r)
	if ok || err != nil {
		return p, "", ok, err
	}
	c, cerr := r.Cookie(sessionCookie)
	if cerr != nil || c.Value == "" {
		return auth.Person{}, "", false, nil
	}
	r2 := r.Clone(r.Context())
	r2.Header.Set("Authorization", "Bearer "+c.Value)
	p, ok, err = h.cfg.Auth.Authenticate(r2)
	return p, c.Value, ok, err
}

// serveLogin takes the sign-in form: a static token, checked like a bearer
// token, answered with a session cookie holding a hub-issued token.
func (h *Hub) serveLogin(w http.ResponseWriter, r *http.Request) {
	if !h.sameOrigin(r) {
		http.Error(w, "Requests from other sites are refused.", http.StatusForbidden)
		return
	}
	token := strings.TrimSpace(r.PostFormValue("token"))
	r2 := r.Clone(r.Context())
	r2.Header = http.Header{"Authorization": {"Bearer " + token}}
	p, ok, err := h.cfg.Auth.Authenticate(r2)
	if err != nil || !ok || token == "" {
		if err != nil {
			h.logAuthFailure(r, err)
		}
		h.renderLogin(w, r, "That token isn't one this hub knows.", http.StatusUnauthorized)
		return
	}
	session, expires, err := h.cfg.Auth.IssueToken(p)
	if errors.Is(err, auth.ErrRenew) {
		session, expires, err = token, time.Now().Add(time.Hour), nil // a kubeconfig's token signs in as itself
	}
	if err != nil {
		http.Error(w, "The hub can't sign a session now.", http.StatusInternalServerError)
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: session, Path: h.pageBase(), Expires: expires,
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: r.TLS != nil,
	})
	http.Redirect(w, r, h.pageBase(), http.StatusSeeOther)
}

func (h *Hub) serveLogout(w http.ResponseWriter, r *http.Request) {
	if !h.sameOrigin(r) {
		http.Error(w, "Requests from other sites are refused.", http.StatusForbidden)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: h.pageBase(), MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: r.TLS != nil})
	http.Redirect(w, r, h.pageBase(), http.StatusSeeOther)
}
