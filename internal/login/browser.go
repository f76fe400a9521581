package login

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"golang.org/x/oauth2"
)

// browserWait bounds the wait for the person to finish signing in in the
// browser.
const browserWait = 5 * time.Minute

// errNoBrowser says the browser didn't start: the device sign-in is next.
var errNoBrowser = errors.New("no browser")

// signedIn is a hub-issued token a sign-in got.
type signedIn struct {
	Token  string
	Expiry time.Time
}

// signInBrowser signs in through the hub's page (decision 038): it
// listens on the loopback, opens GET /login/cli in the browser with an
// S256 PKCE challenge, takes the one-time code the hub sends the browser
// back with, and trades it with the verifier for a hub token.
func signInBrowser(ctx context.Context, client *hubClient, open func(string) error, msg io.Writer) (signedIn, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return signedIn{}, fmt.Errorf("browser sign-in: listen on the loopback: %w", err)
	}
	redirect := "http://" + ln.Addr().String() + "/callback"
	verifier, state := oauth2.GenerateVerifier(), rand.Text()
	q := url.Values{"redirect_uri": {redirect}, "code_challenge": {oauth2.S256ChallengeFromVerifier(verifier)},
		"code_challenge_method": {"S256"}, "state": {state}}
	target := client.url + "/login/cli?" + q.Encode()

	type result struct {
		code string
		err  error
	}
	results := make(chan result, 1)
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/callback" {
			http.NotFound(w, r)
			return
		}
		q := r.URL.Query()
		var res result
		switch {
		case q.Get("state") != state:
			// Not this sign-in's: another page can reach the loopback too.
			http.Error(w, "This isn't the sign-in tether login is waiting for.", http.StatusBadRequest)
			return
		case q.Get("error") != "":
			res.err = fmt.Errorf("the hub said: %s %s", q.Get("error"), q.Get("error_description"))
		case q.Get("code") == "":
			res.err = errors.New("the hub sent the browser back without a code")
		default:
			res.code = q.Get("code")
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Security-Policy", "default-src 'none'")
		if res.err != nil {
			fmt.Fprintf(w, "<!doctype html><title>Tether</title><p>tether login didn't sign in: %s</p>", html.EscapeString(res.err.Error()))
		} else {
			io.WriteString(w, "<!doctype html><title>Tether</title><p>tether login is signed in: you can close this tab.</p>")
		}
		select {
		case results <- res:
		default:
		}
	})}
	go srv.Serve(ln)
	defer srv.Close()

	fmt.Fprintf(msg, "Opening a browser to sign in to %s. If none opens, open this address:\n  %s\n", client.url, target)
	if err := open(target); err != nil {
		return signedIn{}, fmt.Errorf("%w: %v", errNoBrowser, err)
	}
	wait, cancel := context.WithTimeout(ctx, browserWait)
	defer cancel()
	var res result
	select {
	case res = <-results:
	case <-wait.Done():
		return signedIn{}, fmt.Errorf("browser sign-in: no answer from the browser in %s; run tether login --device where no browser can open", browserWait)
	}
	if res.err != nil {
		return signedIn{}, fmt.Errorf("browser sign-in: %w", res.err)
	}
	return client.token(ctx, url.Values{"grant_type": {"authorization_code"}, "code": {res.code},
		"code_verifier": {verifier}, "redirect_uri": {redirect}})
}

// tokenError is the hub's RFC 6749 error answer.
type tokenError struct {
	Code        string `json:"error"`
	Description string `json:"error_description"`
}

func (e *tokenError) Error() string { return e.Code + ": " + e.Description }

// token asks POST /api/login/token for a hub token.
func (h *hubClient) token(ctx context.Context, form url.Values) (signedIn, error) {
	var ans struct {
		Token  string    `json:"access_token"`
		Expiry time.Time `json:"expiry"`
	}
	if err := h.post(ctx, "/api/login/token", form, &ans); err != nil {
		return signedIn{}, err
	}
	if ans.Token == "" {
		return signedIn{}, errors.New("the hub's token answer holds no token")
	}
	if exp := tokenExpiry(ans.Token); !exp.IsZero() {
		ans.Expiry = exp
	}
	return signedIn{Token: ans.Token, Expiry: ans.Expiry}, nil
}

// post sends form to path and decodes a 200 answer's JSON into out; an
// RFC 6749 error answer is a *tokenError.
func (h *hubClient) post(ctx context.Context, path string, form url.Values, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url+path, strings.NewReader(form.Encode()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := h.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxHubAnswer))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var te tokenError
		if json.Unmarshal(body, &te) == nil && te.Code != "" {
			return &te
		}
		if resp.StatusCode == http.StatusNotFound {
			return fmt.Errorf("%s answered 404: this hub is older than tether login's browser sign-in; use --token-file", path)
		}
		return fmt.Errorf("%s answered %d: %s", path, resp.StatusCode, firstLine(body))
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("%s: the hub's answer can't be read: %w", path, err)
	}
	return nil
}
