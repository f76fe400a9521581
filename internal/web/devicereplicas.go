package web

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/tetherhq/tether/internal/auth"
)

// Device sign-ins with hub replicas (issue 35, decision 038): a grant
// lives on the replica that made it, and its device code names that
// replica ("hub-a." then the random part). A poll that lands on another
// replica is carried to the one named, over the peer link, and its answer
// relayed; a user code typed on a replica that doesn't hold it is offered
// to every other, for the person this replica authenticated, and at most
// one holds it. A wrong code counts once, on the replica the person used;
// each replica keeps its own bound on pending grants.

const (
	peerDeviceToken  = PeerPath + "device/token"
	peerDeviceDecide = PeerPath + "device/decide"
)

// replicaSet is what Replicas also tells, when it can (internal/peers
// does): this replica's name, and those of the others it reaches now.
type replicaSet interface {
	Self() string
	ReplicaNames() []string
}

// replicaSet returns cfg.Replicas as a replicaSet, or nil with one hub.
func (wb *Web) replicaSet() replicaSet {
	rs, _ := wb.cfg.Replicas.(replicaSet)
	if rs == nil || rs.Self() == "" {
		return nil
	}
	return rs
}

// deviceIssuerPrefix starts the device codes this replica makes: its name
// and a dot, or nothing with one hub.
func (wb *Web) deviceIssuerPrefix() string {
	if rs := wb.replicaSet(); rs != nil {
		return rs.Self() + "."
	}
	return ""
}

// deviceIssuer is the replica a device code names, or "" for none. The
// random part has no dot.
func deviceIssuer(code string) string {
	i := strings.LastIndexByte(code, '.')
	if i <= 0 {
		return ""
	}
	return code[:i]
}

// devicePollForwarded carries a device code's poll to the replica that
// made the code, if another did, and relays its answer; it reports
// whether it answered.
func (wb *Web) devicePollForwarded(w http.ResponseWriter, r *http.Request, device string) bool {
	rs := wb.replicaSet()
	issuer := deviceIssuer(device)
	if rs == nil || issuer == "" || issuer == rs.Self() {
		return false
	}
	if !slices.Contains(rs.ReplicaNames(), issuer) {
		wb.oauthFail(w, http.StatusBadRequest, &oauthError{"invalid_grant", "that device code isn't one this hub made, or the hub replica that made it has gone: run tether login again"})
		return true
	}
	ctx, cancel := context.WithTimeout(r.Context(), wb.cfg.ReplicaTimeout)
	defer cancel()
	resp, err := wb.askReplicaForm(ctx, issuer, peerDeviceToken, url.Values{"device_code": {device}}, nil)
	if err != nil {
		// The code lives as long as its replica: the command polls again.
		wb.log.Warn("Can't carry a device sign-in's poll to the hub replica that made its code", "replica", issuer, "err", err)
		wb.oauthFail(w, http.StatusBadRequest, &oauthError{"authorization_pending", "the hub replica that made the code didn't answer"})
		return true
	}
	defer resp.Body.Close()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, io.LimitReader(resp.Body, maxCLIRequest))
	return true
}

// servePeerDeviceToken answers another replica's carried poll, from this
// replica's grants alone.
func (wb *Web) servePeerDeviceToken(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	r.Body = http.MaxBytesReader(w, r.Body, maxCLIRequest)
	if err := r.ParseForm(); err != nil || r.PostForm.Get("device_code") == "" {
		wb.oauthFail(w, http.StatusBadRequest, &oauthError{"invalid_request", "device_code is needed"})
		return
	}
	wb.redeemDevice(w, r.PostForm.Get("device_code"))
}

// deviceDecision is the answer of POST peerDeviceDecide.
type deviceDecision struct {
	Done  string `json:"done,omitempty"`
	Error string `json:"error,omitempty"`
}

// servePeerDeviceDecide approves or refuses a user code held here, for the
// person the asking replica asserts: 404 when none is waiting for it.
func (wb *Web) servePeerDeviceDecide(w http.ResponseWriter, r *http.Request) {
	p, _ := assertedPerson(r)
	r.Body = http.MaxBytesReader(w, r.Body, maxCLIRequest)
	r.ParseForm()
	code := normalUserCode(cut(r.PostForm.Get("user_code"), 64))
	done, fail, status, found := wb.decideDevice(p, code, r.PostForm.Get("decision"))
	if !found {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	writeJSON(w, deviceDecision{Done: done, Error: fail})
}

// decideElsewhere offers user code code, with p's decision, to every other
// replica; found is false when none holds it.
func (wb *Web) decideElsewhere(ctx context.Context, p auth.Person, code, decision string) (done, fail string, status int, found bool) {
	rs := wb.replicaSet()
	if rs == nil || code == "" {
		return "", "", http.StatusBadRequest, false
	}
	ctx, cancel := context.WithTimeout(ctx, wb.cfg.ReplicaTimeout)
	defer cancel()
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		got *deviceDecision
		st  int
	)
	form := url.Values{"user_code": {code}, "decision": {decision}}
	for _, name := range rs.ReplicaNames() {
		wg.Go(func() {
			resp, err := wb.askReplicaForm(ctx, name, peerDeviceDecide, form, &p)
			if err != nil {
				wb.log.Warn("Can't offer a device sign-in's code to another hub replica", "replica", name, "err", err)
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode == http.StatusNotFound {
				return
			}
			var dd deviceDecision
			if err := json.NewDecoder(io.LimitReader(resp.Body, maxCLIRequest)).Decode(&dd); err != nil {
				dd.Error = fmt.Sprintf("The hub replica %q gave an answer that can't be read.", name)
			}
			mu.Lock()
			if got == nil {
				got, st = &dd, resp.StatusCode
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	if got == nil {
		return "", "", http.StatusBadRequest, false
	}
	return got.Done, got.Error, st, true
}

// askReplicaForm posts form to path on replica's peer port, as p when
// set.
func (wb *Web) askReplicaForm(ctx context.Context, replica, path string, form url.Values, p *auth.Person) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://replica"+path, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if p != nil {
		req.Header.Set(headerPerson, encodePerson(*p))
	}
	return wb.cfg.Replicas.RoundTripReplica(replica, req)
}
