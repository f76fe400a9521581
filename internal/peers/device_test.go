package peers

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// deviceStartOn asks replica r's public port for a device sign-in.
func deviceStartOn(t *testing.T, r *webReplica) (device, user string) {
	t.Helper()
	resp, err := http.PostForm(r.public+"/api/login/device", url.Values{})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ans struct {
		Device string `json:"device_code"`
		User   string `json:"user_code"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/api/login/device on %s: %d %v", r.name, resp.StatusCode, err)
	}
	if !strings.HasPrefix(ans.Device, r.name+".") {
		t.Fatalf("the device code %q doesn't name %s", ans.Device, r.name)
	}
	return ans.Device, ans.User
}

// devicePollOn polls replica r with device code device: the token, or the
// OAuth error's code.
func devicePollOn(t *testing.T, r *webReplica, device string) (token, fail string) {
	t.Helper()
	resp, err := http.PostForm(r.public+"/api/login/token", url.Values{
		"grant_type": {"urn:ietf:params:oauth:grant-type:device_code"}, "device_code": {device}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ans struct {
		Token string `json:"access_token"`
		Error string `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil {
		t.Fatalf("poll on %s: %d %v", r.name, resp.StatusCode, err)
	}
	if (ans.Token != "") != (resp.StatusCode == http.StatusOK) {
		t.Fatalf("poll on %s: %d %+v", r.name, resp.StatusCode, ans)
	}
	return ans.Token, ans.Error
}

// decideOn posts /device on replica r as user.
func decideOn(t *testing.T, r *webReplica, user, code, decision string) (int, string) {
	t.Helper()
	form := url.Values{"user_code": {code}, "decision": {decision}}
	req, err := http.NewRequest(http.MethodPost, r.public+"/device", strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-Remote-User", user)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestDeviceSignInAcrossReplicas: a device sign-in started on one replica
// is polled and approved on any, as on one hub (issue 35): the polls are
// carried to the replica that made the code, and the user code is offered
// to the others, for the person the first authenticated.
func TestDeviceSignInAcrossReplicas(t *testing.T) {
	rs := startWebReplicas(t, webOptions{}, "hub-a", "hub-b", "hub-c")
	a, b, c := rs[0], rs[1], rs[2]
	for _, r := range rs {
		eventually(t, 5*time.Second, "links to the others", func() bool { return len(r.peers.ReplicaNames()) == 2 })
	}

	device, user := deviceStartOn(t, a)
	if _, fail := devicePollOn(t, b, device); fail != "authorization_pending" {
		t.Fatalf("a poll on hub-b before approval: %q, want authorization_pending", fail)
	}
	if status, body := decideOn(t, b, "alice", user, "approve"); status != http.StatusOK || !strings.Contains(body, "Signed in") {
		t.Fatalf("approving hub-a's code on hub-b: %d %s", status, body)
	}
	token, fail := devicePollOn(t, b, device)
	if token == "" {
		t.Fatalf("a poll on hub-b after approval: %q, want the token", fail)
	}
	bearer, _ := http.NewRequest(http.MethodGet, "/", nil)
	bearer.Header.Set("Authorization", "Bearer "+token)
	p, ok, err := a.people.Authenticate(bearer)
	if !ok || err != nil || p.Name != "alice" {
		t.Errorf("the device token is %+v %v %v; want alice's", p, ok, err)
	}
	if _, fail := devicePollOn(t, a, device); fail != "invalid_grant" {
		t.Errorf("a used device code on hub-a: %q, want invalid_grant", fail)
	}

	// Started on hub-c, approved on hub-a, polled on hub-c itself.
	device, user = deviceStartOn(t, c)
	if status, body := decideOn(t, a, "alice", strings.ToLower(strings.ReplaceAll(user, "-", "")), "approve"); status != http.StatusOK {
		t.Fatalf("approving hub-c's code on hub-a: %d %s", status, body)
	}
	if token, fail := devicePollOn(t, c, device); token == "" {
		t.Fatalf("a poll on hub-c after approval on hub-a: %q, want the token", fail)
	}

	// Refused on another replica: the poll says so wherever it lands.
	device, user = deviceStartOn(t, b)
	if status, body := decideOn(t, c, "alice", user, "deny"); status != http.StatusOK || !strings.Contains(body, "Refused") {
		t.Fatalf("refusing hub-b's code on hub-c: %d %s", status, body)
	}
	if _, fail := devicePollOn(t, a, device); fail != "access_denied" {
		t.Errorf("a poll on hub-a of a code refused on hub-c: %q, want access_denied", fail)
	}
	if status, _ := decideOn(t, a, "alice", user, "approve"); status != http.StatusBadRequest {
		t.Errorf("approving a code already refused: %d, want 400", status)
	}
}

// TestDeviceCodesNoReplicaHolds: a user code no replica holds is refused,
// and counts as wrong once, on the replica the person typed it on; a
// device code from no replica of this hub, or forged, is refused.
func TestDeviceCodesNoReplicaHolds(t *testing.T) {
	rs := startWebReplicas(t, webOptions{}, "hub-a", "hub-b")
	a, b := rs[0], rs[1]
	for _, r := range rs {
		eventually(t, 5*time.Second, "links to the other", func() bool { return len(r.peers.ReplicaNames()) == 1 })
	}
	for i := range 5 {
		if status, body := decideOn(t, a, "mallory", "BCDF-GHJK", "approve"); status != http.StatusBadRequest || !strings.Contains(body, "No sign-in is waiting") {
			t.Fatalf("wrong code %d on hub-a: %d %s", i, status, body)
		}
	}
	if status, _ := decideOn(t, a, "mallory", "BCDF-GHJK", "approve"); status != http.StatusTooManyRequests {
		t.Errorf("a sixth wrong code on hub-a: %d, want 429", status)
	}
	// hub-b was asked five times, and counted none of them.
	if status, _ := decideOn(t, b, "mallory", "BCDF-GHJK", "approve"); status != http.StatusBadRequest {
		t.Errorf("a first wrong code on hub-b: %d, want 400", status)
	}

	device, _ := deviceStartOn(t, a)
	random := device[len("hub-a."):]
	for _, forged := range []string{
		"hub-a." + strings.Repeat("A", len(random)), // hub-a's, never made
		"hub-z." + random, // a replica this hub doesn't have
		random,            // no replica named
		"other-hub." + random,
	} {
		for _, r := range rs {
			if token, fail := devicePollOn(t, r, forged); token != "" || fail != "invalid_grant" {
				t.Errorf("the forged device code %q on %s: %q %q, want invalid_grant", forged, r.name, token, fail)
			}
		}
	}
}
