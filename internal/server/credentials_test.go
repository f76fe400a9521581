package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/tetherhq/tether/internal/testutil/fakecluster"
)

// TestWebSocketBearerProtocolIsRemoved: Kubernetes takes a bearer token
// in a WebSocket's subprotocols too (base64url.bearer.authorization.k8s.io.
// and the token), where it stands in for Authorization, and the API server
// tries it when the Authorization the hub sends fails (a forwardToken
// cluster that doesn't take the person's token, say). Passed on, a person
// could exec as whoever's token they hold, with the hub's audit naming
// them. The hub removes it as it removes Authorization; the other
// subprotocols, which choose the stream protocol, go through.
func TestWebSocketBearerProtocolIsRemoved(t *testing.T) {
	fc := fakecluster.New(t)
	h, _ := proxyHub(t, fc, "")
	for _, sent := range [][]string{
		{"v5.channel.k8s.io, base64url.bearer.authorization.k8s.io.c29tZW9uZS1lbHNl, v4.channel.k8s.io"},
		{"v5.channel.k8s.io", "Base64url.Bearer.Authorization.K8s.Io.c29tZW9uZS1lbHNl"},
	} {
		hdr := http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}, "Sec-Websocket-Version": {"13"},
			"Sec-Websocket-Key": {"dGhlIHNhbXBsZSBub25jZQ=="}, "Sec-Websocket-Protocol": sent}
		code, body, _ := call(t, "GET", h.url+"/clusters/open/api/v1/namespaces/a/pods/p/exec?command=sh", aliceToken, hdr)
		var got struct{ Header http.Header }
		if err := json.Unmarshal([]byte(body), &got); code != 200 || err != nil {
			t.Fatalf("%q: %d %s", sent, code, body)
		}
		protocols := strings.Join(got.Header.Values("Sec-Websocket-Protocol"), ", ")
		if strings.Contains(strings.ToLower(protocols), "bearer") || !strings.Contains(protocols, "v5.channel.k8s.io") {
			t.Errorf("sent %q, the API server saw Sec-WebSocket-Protocol %q", sent, protocols)
		}
	}
}
