package web

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/tetherhq/tether/internal/auth"
)

// FuzzLoginRequests: tether login's requests (the /login/cli query, the
// token form, a user code) never panic, and what passes is what the hub
// relies on: a loopback redirect URI, a 43-character challenge.
func FuzzLoginRequests(f *testing.F) {
	f.Add("redirect_uri=http%3A%2F%2F127.0.0.1%3A5%2Fcb&code_challenge=E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM&code_challenge_method=S256&state=x")
	f.Add("redirect_uri=http%3A%2F%2F%5B%3A%3A1%5D%3A5%2F&code_challenge_method=plain")
	f.Add("grant_type=authorization_code&code=abc&code_verifier=dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk&redirect_uri=x")
	f.Add("grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Adevice_code&device_code=x&user_code=bcdf-ghjk")
	people, err := auth.New(auth.Config{Users: cliUsers})
	if err != nil {
		f.Fatal(err)
	}
	defer people.Close()
	wb := New(Config{Auth: people, PublicURL: "http://hub.test"})
	f.Fuzz(func(t *testing.T, raw string) {
		// The handlers themselves: whatever comes, an answer, never a panic
		// or a redirect anywhere but the loopback.
		rec := httptest.NewRecorder()
		r := httptest.NewRequest("POST", "/api/login/token", strings.NewReader(raw))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		wb.ServeLoginToken(rec, r)
		if rec.Code == http.StatusOK {
			t.Fatalf("a token for %q", raw)
		}
		rec = httptest.NewRecorder()
		r = httptest.NewRequest("GET", "/login/cli", nil)
		r.URL.RawQuery = raw
		wb.ServeCLILogin(rec, r)
		if rec.Code == http.StatusFound {
			t.Fatalf("redirected to %q for %q, not signed in", rec.Header().Get("Location"), raw)
		}
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		if req, err := parseCLIRequest(q); err == nil {
			u, perr := url.Parse(req.RedirectURI)
			if perr != nil || u.Scheme != "http" || (u.Hostname() != "127.0.0.1" && u.Hostname() != "::1" && u.Hostname() != "localhost") || u.User != nil {
				t.Fatalf("took redirect_uri %q", req.RedirectURI)
			}
			if len(req.Challenge) != 43 || req.State == "" {
				t.Fatalf("took %+v", req)
			}
		}
		parseTokenRequest(q)
		if c := normalUserCode(q.Get("user_code")); c != "" && (len(c) != 9 || c[4] != '-') {
			t.Fatalf("user code %q kept as %q", q.Get("user_code"), c)
		}
	})
}
