package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/tetherhq/tether/internal/kubeproxy"
	"github.com/tetherhq/tether/internal/recording"
	"github.com/tetherhq/tether/internal/testutil/fakecluster"
	"github.com/tetherhq/tether/internal/testutil/syncbuf"
)

// wsClientFrame is a masked binary frame of channel ch, as client-go
// sends one.
func wsClientFrame(ch byte, data []byte) []byte {
	key := []byte{0x11, 0x22, 0x33, 0x44}
	payload := append([]byte{ch}, data...)
	var b []byte
	switch n := len(payload); {
	case n < 126:
		b = []byte{0x82, 0x80 | byte(n)}
	default:
		b = []byte{0x82, 0x80 | 126, byte(n >> 8), byte(n)}
	}
	b = append(b, key...)
	for i, c := range payload {
		b = append(b, c^key[i&3])
	}
	return b
}

// execThrough runs a tty exec on cluster open's pod web as the token's
// person, over the hub, sending stdin (a resize first), and returns its
// audit line once the exec is done.
func execThrough(t *testing.T, h *testHub, audit *syncbuf.Buffer, token string, stdin []byte) kubeproxy.AuditRecord {
	t.Helper()
	var send bytes.Buffer
	send.Write(wsClientFrame(4, []byte(`{"Width":100,"Height":30}`)))
	for len(stdin) > 0 {
		n := min(len(stdin), 32<<10)
		send.Write(wsClientFrame(0, stdin[:n]))
		stdin = stdin[n:]
	}
	c, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	path := "/api/v1/namespaces/default/pods/web/exec"
	fmt.Fprintf(c, "GET /clusters/open%s?command=sh&tty=true&stdin=true&bytes=%d HTTP/1.1\r\nHost: hub\r\nAuthorization: Bearer %s\r\n"+
		"Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"+
		"Sec-WebSocket-Protocol: v5.channel.k8s.io\r\n\r\n", path, send.Len(), token)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("exec: %v %v", resp, err)
	}
	ready := make([]byte, 10)
	if _, err := io.ReadFull(br, ready); err != nil || !bytes.HasSuffix(ready, []byte("ready\r\n")) {
		t.Fatalf("read %q, %v", ready, err)
	}
	go c.Write(send.Bytes()) // the hub reads as it writes on
	done := make([]byte, 9)
	if _, err := io.ReadFull(br, done); err != nil || !bytes.HasSuffix(done, []byte("done\r\n")) {
		t.Fatalf("read %q, %v", done, err)
	}
	c.Close()
	for {
		line := auditLineOf(t, audit, path)
		if line.Person == personOf(token) {
			return line
		}
		audit.Reset() // another's exec: the next line is this one's
	}
}

func personOf(token string) string {
	if token == aliceToken {
		return "alice"
	}
	return "bob"
}

// recordingsHub is proxyHub with recordings in dir, bob's group ops
// viewing everyone's.
func recordingsHub(t *testing.T, cfg recording.Config, mods ...func(*Config)) (*testHub, *syncbuf.Buffer) {
	t.Helper()
	store, err := recording.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close) // after the hub's Cleanup
	return proxyHub(t, fakecluster.New(t), "", append(mods, func(c *Config) {
		c.Recordings, c.RecordingViewers = store, []string{"ops"}
	})...)
}

// TestExecIsRecorded: a tty exec through the hub is recorded as an
// asciicast file, named on its audit line, listed and served to its
// person and the viewers' groups only, and played on a page whose CSP
// alone allows WebAssembly.
func TestExecIsRecorded(t *testing.T) {
	h, audit := recordingsHub(t, recording.Config{Dir: t.TempDir()})
	line := execThrough(t, h, audit, aliceToken, []byte("ls -l\r"))
	if line.Recording != line.RequestID || line.RecordingStopped != "" {
		t.Fatalf("the audit line says recording %q, stopped %q; want %q and nothing", line.Recording, line.RecordingStopped, line.RequestID)
	}
	audit.Reset()
	bobs := execThrough(t, h, audit, bobToken, []byte("id\r"))

	list := func(token, cluster string) (int, kubeproxyRecordings) {
		code, body, _ := call(t, "GET", h.url+"/api/clusters/"+cluster+"/recordings", token, nil)
		var l kubeproxyRecordings
		json.Unmarshal([]byte(body), &l)
		return code, l
	}
	if code, l := list(aliceToken, "open"); code != 200 || len(l.Recordings) != 1 || l.Recordings[0].ID != line.RequestID || l.Everyone {
		t.Errorf("alice's list: %d %+v; want hers alone", code, l)
	}
	if code, l := list(bobToken, "open"); code != 200 || len(l.Recordings) != 2 || !l.Everyone {
		t.Errorf("bob's list (a viewer): %d %+v; want both", code, l)
	}
	if code, _ := list(aliceToken, "ops"); code != http.StatusNotFound {
		t.Errorf("alice's list of a cluster she can't see: %d, want 404", code)
	}
	code, cast, answer := call(t, "GET", h.url+"/api/clusters/open/recordings/"+line.RequestID, aliceToken, nil)
	if code != 200 || !strings.Contains(cast, `"width":100,"height":30`) || !regexp.MustCompile(`"o","ready\\r\\n"\]\n.*"i","ls -l\\r"\]\n.*"o","done\\r\\n"`).MatchString(cast) {
		t.Errorf("alice's recording: %d %q", code, cast)
	}
	if ct := answer.Get("Content-Type"); ct != "application/x-asciicast" {
		t.Errorf("Content-Type %q", ct)
	}
	if code, _, _ := call(t, "GET", h.url+"/api/clusters/open/recordings/"+bobs.RequestID, aliceToken, nil); code != http.StatusNotFound {
		t.Errorf("alice got bob's recording: %d, want 404", code)
	}
	if code, _, _ := call(t, "GET", h.url+"/api/clusters/open/recordings/"+line.RequestID, bobToken, nil); code != 200 {
		t.Errorf("bob (a viewer) got alice's recording: %d, want 200", code)
	}

	code, page, answer := call(t, "GET", h.url+"/cluster/open/recordings/"+line.RequestID, aliceToken, nil)
	if csp := answer.Get("Content-Security-Policy"); code != 200 || !strings.Contains(csp, "'wasm-unsafe-eval'") || !strings.Contains(page, "asciinema-player.min.js") {
		t.Errorf("the player's page: %d, CSP %q", code, csp)
	}
	for _, p := range []string{"/", "/cluster/open"} {
		if _, _, answer := call(t, "GET", h.url+p, aliceToken, nil); answer.Get("Content-Security-Policy") != "default-src 'self'; frame-ancestors 'none'" {
			t.Errorf("%s: CSP %q, want the page's own, unchanged", p, answer.Get("Content-Security-Policy"))
		}
	}
	if code, _, _ := call(t, "GET", h.url+"/cluster/open/recordings/"+bobs.RequestID, aliceToken, nil); code != http.StatusNotFound {
		t.Errorf("alice's player page of bob's recording: %d, want 404", code)
	}
	for _, f := range []string{"asciinema-player.min.js", "asciinema-player.css"} {
		if code, _, _ := call(t, "GET", h.url+"/static/vendor/asciinema-player/"+f, aliceToken, nil); code != 200 {
			t.Errorf("%s: %d", f, code)
		}
	}
}

type kubeproxyRecordings struct {
	Enabled    bool             `json:"enabled"`
	Everyone   bool             `json:"everyone"`
	Recordings []recording.Meta `json:"recordings"`
}

// stuckFile is a recording's file whose writes never return until the
// test ends: a disk that hangs.
type stuckFile struct{ release chan struct{} }

func (f stuckFile) Write(b []byte) (int, error) { <-f.release; return len(b), nil }
func (f stuckFile) Close() error                { return nil }

// TestStuckRecordingNeverSlowsTheExec: with the recording's disk hung, a
// session of 2 MiB goes through whole, and its audit line says the
// recording stopped.
func TestStuckRecordingNeverSlowsTheExec(t *testing.T) {
	f := stuckFile{release: make(chan struct{})}
	h, audit := recordingsHub(t, recording.Config{Dir: t.TempDir(), QueueBytes: 256 << 10,
		Create: func(string) (io.WriteCloser, error) { return f, nil }})
	t.Cleanup(func() { close(f.release) }) // before the store's Close, which waits for its writer
	line := execThrough(t, h, audit, aliceToken, bytes.Repeat([]byte("x"), 2<<20))
	if line.Recording == "" || line.RecordingStopped != recording.StoppedBehind {
		t.Fatalf("the audit line says recording %q, stopped %q; want it named and %q", line.Recording, line.RecordingStopped, recording.StoppedBehind)
	}
}
