package web

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/hostport"
)

// `tether login --device` (RFC 8628, decision 038): the command asks
// POST /api/login/device for a device code and a user code, shows the
// user code, and polls POST /api/login/token; the person opens /device
// anywhere, signed in, and approves the code. The grants live on the
// replica that made them; with hub replicas, polls and codes that land on
// another are carried to it over the peer link (devicereplicas.go).

const (
	devicePage      = "device"
	deviceTTL       = 5 * time.Minute
	deviceInterval  = 5 * time.Second
	maxDeviceGrants = 1000
	// maxDeviceGrantsPerAddress bounds the pending grants started from
	// one client address (the TCP peer's host), so that one client can't
	// hold all the others' places: POST /api/login/device asks nothing
	// of whoever calls it. Behind an ingress every client has its
	// address: rate-limit the endpoint there.
	maxDeviceGrantsPerAddress = 100
	// maxWrongCodes wrong user codes from one person lock them out of
	// /device for deviceLockout: a code is one of 20^8.
	maxWrongCodes = 5
	deviceLockout = 5 * time.Minute
	// userCodeChars are consonants: no word, no 0/O or 1/I to mistake.
	userCodeChars = "BCDFGHJKLMNPQRSTVWXZ"
)

// deviceGrant is one device sign-in, pending, approved or refused.
type deviceGrant struct {
	userCode string
	addr     string // the host of the client that started it
	until    time.Time
	interval time.Duration
	lastPoll time.Time
	denied   bool
	token    string // set once approved
	expiry   time.Time
}

// devices are a replica's device sign-ins.
type devices struct {
	mu     sync.Mutex
	byCode map[string]*deviceGrant // by device code's SHA-256
	byUser map[string]string       // user code → key in byCode
	wrong  map[string]wrongCodes   // by person
}

type wrongCodes struct {
	n     int
	until time.Time
}

func (wb *Web) devices() *devices {
	wb.usedCodes()
	return &wb.cli.devices
}

// sweep forgets expired grants and lockouts. Called with mu held.
func (d *devices) sweep(now time.Time) {
	for k, g := range d.byCode {
		if !now.Before(g.until) {
			delete(d.byCode, k)
			delete(d.byUser, g.userCode)
		}
	}
	for k, w := range d.wrong {
		if !now.Before(w.until) {
			delete(d.wrong, k)
		}
	}
}

func deviceKey(code string) string {
	sum := sha256.Sum256([]byte(code))
	return hex.EncodeToString(sum[:])
}

// newUserCode is eight of userCodeChars, as BCDF-GHJK.
func newUserCode() string {
	b := make([]byte, 0, 9)
	var r [1]byte
	for len(b) < 9 {
		if len(b) == 4 {
			b = append(b, '-')
		}
		rand.Read(r[:])
		if r[0] < 240 { // 12 × 20: no character likelier than another
			b = append(b, userCodeChars[int(r[0])%len(userCodeChars)])
		}
	}
	return string(b)
}

// normalUserCode is code as the hub keeps it: capitals, one dash.
func normalUserCode(code string) string {
	code = strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z':
			return r - 'a' + 'A'
		case r >= 'A' && r <= 'Z':
			return r
		}
		return -1
	}, code)
	if len(code) != 8 {
		return ""
	}
	return code[:4] + "-" + code[4:]
}

// ServeDeviceStart answers POST /api/login/device (RFC 8628 section 3.2).
func (wb *Web) ServeDeviceStart(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	d, now := wb.devices(), wb.now()
	device := wb.deviceIssuerPrefix() + rand.Text() + rand.Text()
	user := newUserCode()
	d.mu.Lock()
	d.sweep(now)
	for _, taken := d.byUser[user]; taken; _, taken = d.byUser[user] {
		user = newUserCode()
	}
	addr, _ := hostport.Host(r.RemoteAddr)
	full, fromAddr := len(d.byCode) >= maxDeviceGrants, 0
	for _, g := range d.byCode {
		if g.addr == addr {
			fromAddr++
		}
	}
	ok := !full && fromAddr < maxDeviceGrantsPerAddress
	if ok {
		k := deviceKey(device)
		d.byCode[k] = &deviceGrant{userCode: user, addr: addr, until: now.Add(deviceTTL), interval: deviceInterval}
		d.byUser[user] = k
	}
	d.mu.Unlock()
	if !ok {
		why := "too many device sign-ins are waiting: try again in a few minutes"
		if !full {
			why = "too many device sign-ins are waiting from this address: try again in a few minutes"
		}
		wb.oauthFail(w, http.StatusServiceUnavailable, &oauthError{"temporarily_unavailable", why})
		return
	}
	verify := strings.TrimSuffix(wb.cfg.PublicURL, "/") + "/" + devicePage
	w.Header().Set("Content-Type", "application/json")
	writeJSON(w, map[string]any{
		"device_code":               device,
		"user_code":                 user,
		"verification_uri":          verify,
		"verification_uri_complete": verify + "?user_code=" + user,
		"expires_in":                int(deviceTTL.Seconds()),
		"interval":                  int(deviceInterval.Seconds()),
	})
}

// redeemDevice answers a device code's poll (RFC 8628 section 3.5).
func (wb *Web) redeemDevice(w http.ResponseWriter, device string) {
	d, now := wb.devices(), wb.now()
	k := deviceKey(device)
	d.mu.Lock()
	g, ok := d.byCode[k]
	var fail *oauthError
	switch {
	case !ok:
		fail = &oauthError{"invalid_grant", "that device code isn't one this hub made, or has been used"}
	case !now.Before(g.until):
		fail = &oauthError{"expired_token", "the code has expired: run tether login again"}
	case g.denied:
		fail = &oauthError{"access_denied", "the sign-in was refused on the hub's page"}
	case g.token == "" && !g.lastPoll.IsZero() && now.Sub(g.lastPoll) < g.interval:
		g.interval += 5 * time.Second
		g.lastPoll = now
		fail = &oauthError{"slow_down", "poll less often"}
	case g.token == "":
		g.lastPoll = now
		fail = &oauthError{"authorization_pending", "waiting for the code to be approved on the hub's page"}
	}
	token, expiry := "", time.Time{}
	if fail == nil || fail.Code == "expired_token" || fail.Code == "access_denied" {
		if ok {
			token, expiry = g.token, g.expiry
			delete(d.byCode, k)
			delete(d.byUser, g.userCode)
		}
	}
	d.mu.Unlock()
	if fail != nil {
		wb.oauthFail(w, http.StatusBadRequest, fail)
		return
	}
	wb.answerToken(w, token, expiry)
}

// ServeDevicePage answers GET /device: the form for a user code, for a
// signed-in person.
func (wb *Web) ServeDevicePage(w http.ResponseWriter, r *http.Request) {
	wb.serveDevice(w, r, false)
}

// ServeDeviceApprove answers POST /device: the person approves or refuses
// a user code. Like the page's other forms, it is refused from other sites
// (Origin, Fetch Metadata) and its cookie is SameSite=Lax.
func (wb *Web) ServeDeviceApprove(w http.ResponseWriter, r *http.Request) {
	wb.serveDevice(w, r, true)
}

func (wb *Web) serveDevice(w http.ResponseWriter, r *http.Request, post bool) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'")
	if post && wb.refuseOtherSites(w, r) {
		return
	}
	if !post && auth.FromOtherSite(r, wb.cfg.PublicURL, true) {
		http.Error(w, "Requests from other sites are refused.", http.StatusForbidden)
		return
	}
	p, ok, err := wb.cookiePerson(r)
	if err != nil {
		wb.cfg.Proxy.LogAuthFailure(r, err)
	}
	if !ok || err != nil {
		if refusedIdentity(err) {
			wb.renderLogin(w, r, err.Error(), http.StatusForbidden)
			return
		}
		r2 := r.Clone(r.Context())
		r2.Method, r2.URL.RawQuery = http.MethodGet, ""
		wb.renderLogin(w, r2, "Sign in to approve tether login's code.", http.StatusUnauthorized)
		return
	}
	data := deviceData{Base: wb.pageBase(), Name: p.Name}
	if !post {
		data.Code = cut(r.URL.Query().Get("user_code"), 20)
		wb.renderDevice(w, r, http.StatusOK, data)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxCLIRequest)
	r.ParseForm()
	code, decision := normalUserCode(cut(r.PostFormValue("user_code"), 64)), r.PostFormValue("decision")
	d, now := wb.devices(), wb.now()
	d.mu.Lock()
	d.sweep(now)
	locked := d.wrong[p.Name].n >= maxWrongCodes
	d.mu.Unlock()
	status := http.StatusOK
	var found bool
	if locked {
		data.Error = "Too many codes that aren't waiting: try again in a few minutes."
		status = http.StatusTooManyRequests
	} else if data.Done, data.Error, status, found = wb.decideDevice(p, code, decision); !found {
		// Another replica may have made it: ask them (devicereplicas.go).
		data.Done, data.Error, status, found = wb.decideElsewhere(r.Context(), p, code, decision)
	}
	if !locked && !found {
		// A wrong code counts once, here, where the person typed it.
		d.mu.Lock()
		wc := d.wrong[p.Name]
		wc.n++
		wc.until = now.Add(deviceLockout)
		d.wrong[p.Name] = wc
		d.mu.Unlock()
		data.Error, data.Code = "No sign-in is waiting for that code: check it, or run tether login again.", cut(r.PostFormValue("user_code"), 20)
		status = http.StatusBadRequest
	}
	wb.renderDevice(w, r, status, data)
}

// decideDevice approves or refuses (decision "deny") the sign-in waiting
// here for user code code, for p; found is false when none is.
func (wb *Web) decideDevice(p auth.Person, code, decision string) (done, fail string, status int, found bool) {
	d, now := wb.devices(), wb.now()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sweep(now)
	k, ok := d.byUser[code]
	if !ok || d.byCode[k].token != "" || d.byCode[k].denied {
		return "", "", http.StatusBadRequest, false
	}
	g := d.byCode[k]
	if decision == "deny" {
		g.denied = true
		return "Refused: tether login will say so.", "", http.StatusOK, true
	}
	d.mu.Unlock()
	token, expiry, err := wb.cfg.Auth.IssueToken(p)
	d.mu.Lock()
	if err != nil {
		return "", "The hub can't sign a token for you now: sign in again.", http.StatusInternalServerError, true
	}
	g.token, g.expiry = token, expiry
	wb.log.Info("Signed in tether login on a device", "user", p.Name)
	return "Signed in: go back to your terminal.", "", http.StatusOK, true
}

func (wb *Web) renderDevice(w http.ResponseWriter, r *http.Request, status int, data deviceData) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	wb.renderPage(w, r, deviceSignInPage(data))
}
