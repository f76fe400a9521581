package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/kubeproxy"
	"github.com/tetherhq/tether/internal/testutil/fakecluster"
	"github.com/tetherhq/tether/internal/testutil/syncbuf"
)

// TestAuditLineHasEveryField: SPEC section 3 names the fields of each audit
// line; each is on every line, also when the hub doesn't know who sent the
// request (401) or the person has no groups, where person is "" and groups
// is [], never absent or null.
func TestAuditLineHasEveryField(t *testing.T) {
	fc := fakecluster.New(t)
	h, audit := proxyHub(t, fc, "")
	tests := []struct {
		name         string
		header       http.Header
		status       int
		person       string
		wantGroupsOf int
	}{
		{"no credentials", nil, http.StatusUnauthorized, "", 0},
		{"a person without groups", http.Header{"X-Remote-User": {"carol"}}, http.StatusOK, "carol", 0},
		{"a person with groups", http.Header{"X-Remote-User": {"dave"}, "X-Remote-Group": {"dev"}}, http.StatusOK, "dave", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := strings.Count(audit.String(), "\n")
			code, body, _ := call(t, "GET", h.url+"/clusters/open/api/v1/namespaces/a/pods", "", tt.header)
			if code != tt.status {
				t.Fatalf("status %d, want %d: %s", code, tt.status, body)
			}
			// The line is written once the answer is: wait for it. The
			// tests' requests are the only ones to the clusters.
			eventually(t, 5*time.Second, "the request's audit line", func() bool { return strings.Count(audit.String(), "\n") > before })
			line := lastLine(audit.String())
			var fields map[string]json.RawMessage
			if err := json.Unmarshal([]byte(line), &fields); err != nil {
				t.Fatalf("audit line %q: %v", line, err)
			}
			for _, k := range []string{"time", "person", "groups", "cluster", "verb", "path", "status", "duration", "bytes", "requestId"} {
				if _, ok := fields[k]; !ok {
					t.Errorf("the audit line has no %q: %s", k, line)
				}
			}
			var rec struct {
				Person    string
				Groups    []string
				Status    int
				RequestID string
			}
			json.Unmarshal([]byte(line), &rec)
			if rec.Person != tt.person || rec.Status != tt.status || rec.RequestID == "" || string(fields["groups"]) == "null" || len(rec.Groups) != tt.wantGroupsOf {
				t.Errorf("audit line %s: want person %q, status %d, %d groups (never null), a request id", line, tt.person, tt.status, tt.wantGroupsOf)
			}
		})
	}
}

// stalledWriter takes no write until release is closed, as a full disk or a
// slow log pipe may.
type stalledWriter struct{ release chan struct{} }

func (w stalledWriter) Write(b []byte) (int, error) {
	<-w.release
	return len(b), nil
}

// TestAnswerGoesOutBeforeTheAuditLine: the audit line is written once the
// answer has gone to the client, so an audit sink that stalls holds up the
// request's goroutine but not the person waiting for the answer.
func TestAnswerGoesOutBeforeTheAuditLine(t *testing.T) {
	fc := fakecluster.New(t)
	audit := stalledWriter{release: make(chan struct{})}
	h, _ := proxyHub(t, fc, "", func(c *Config) { c.Audit = audit })
	defer close(audit.release) // before the hub stops: its handler waits on the write
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	code, body, _ := callWithin(t, ctx, "GET", h.url+"/clusters/open/api/v1/namespaces/a/pods", "", http.Header{"X-Remote-User": {"carol"}})
	if code != http.StatusOK || !strings.Contains(body, `"path":"/api/v1/namespaces/a/pods"`) {
		t.Fatalf("status %d, body %q", code, body)
	}
}

// fullDisk is an audit sink whose every write fails, as a file on a full
// disk's does.
type fullDisk struct{}

func (fullDisk) Write([]byte) (int, error) { return 0, syscall.ENOSPC }

// TestAuditLineThatCantBeWritten: a lost audit line doesn't fail the
// request, but it isn't lost silently: the hub logs it, rate-limited, and
// counts it for operators to alert on.
func TestAuditLineThatCantBeWritten(t *testing.T) {
	fc := fakecluster.New(t)
	h, _ := proxyHub(t, fc, "", func(c *Config) { c.Audit = fullDisk{} })
	for range 3 {
		if code, body, _ := call(t, "GET", h.url+"/clusters/open/api", aliceToken, nil); code != http.StatusOK {
			t.Fatalf("%d %s", code, body)
		}
	}
	eventually(t, 5*time.Second, "three lost lines counted", func() bool { return h.value("tether_audit_write_errors_total") == 3 })
	if n := strings.Count(h.logs.String(), `Can't write an audit line`); n != 1 || !strings.Contains(h.logs.String(), "no space left on device") {
		t.Errorf("logged %d times, want once (rate-limited), saying why:\n%s", n, h.logs)
	}
}

// TestAuditLineOfALongPath: anyone may send a path of up to a megabyte, even
// without signing in; its audit line keeps the path's first 4 KiB and its
// length, so no one fills the audit log a megabyte a request.
func TestAuditLineOfALongPath(t *testing.T) {
	fc := fakecluster.New(t)
	h, audit := proxyHub(t, fc, "")
	long := "/api/v1/namespaces/" + strings.Repeat("a", 900<<10)
	if code, _, _ := call(t, "GET", h.url+"/clusters/open"+long, "", nil); code != http.StatusUnauthorized {
		t.Fatalf("%d, want 401", code)
	}
	eventually(t, 5*time.Second, "an audit line", func() bool { return audit.String() != "" })
	var rec kubeproxy.AuditRecord
	if err := json.Unmarshal([]byte(lastLine(audit.String())), &rec); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("…(%d bytes)", len(long)); len(rec.Path) > 5<<10 || !strings.HasPrefix(rec.Path, long[:4<<10]) || !strings.HasSuffix(rec.Path, want) {
		t.Errorf("audit path of %d bytes, ending %q; want the first 4 KiB and %q", len(rec.Path), rec.Path[max(0, len(rec.Path)-30):], want)
	}
}

// TestAuditLineOfLongNames: a 900 KB cluster name, a long method, and a
// person with hundreds of long groups write an audit line of a few KiB,
// each field cut and marked (issue 33: it was 900 KB, for one request
// without signing in).
func TestAuditLineOfLongNames(t *testing.T) {
	fc := fakecluster.New(t)
	h, audit := proxyHub(t, fc, "")
	cluster := strings.Repeat("c", 900<<10)
	method := strings.Repeat("M", 30<<10)
	if code, _, _ := call(t, method, h.url+"/clusters/"+cluster+"/api", "", nil); code != http.StatusUnauthorized {
		t.Fatalf("%d, want 401", code)
	}
	eventually(t, 5*time.Second, "an audit line", func() bool { return audit.String() != "" })
	line := lastLine(audit.String())
	var rec kubeproxy.AuditRecord
	if err := json.Unmarshal([]byte(line), &rec); err != nil {
		t.Fatal(err)
	}
	if len(line) > 4<<10 || rec.Cluster != cluster[:1<<10]+fmt.Sprintf("…(%d bytes)", len(cluster)) ||
		rec.Method != method[:1<<10]+fmt.Sprintf("…(%d bytes)", len(method)) || len(rec.Verb) > 1<<10+30 {
		t.Errorf("an audit line of %d bytes: cluster of %d bytes, method of %d, verb of %d", len(line), len(rec.Cluster), len(rec.Method), len(rec.Verb))
	}
	t.Logf("the long names' audit line: %d bytes", len(line))

	// Groups: each cut, and the list too.
	groups := make([]string, 300)
	for i := range groups {
		groups[i] = fmt.Sprintf("g%03d-%s", i, strings.Repeat("x", 2<<10))
	}
	who := http.Header{"X-Remote-User": {"carol"}, "X-Remote-Group": {strings.Join(groups, ",")}}
	if code, body, _ := call(t, "GET", h.url+"/clusters/open/api", "", who); code != http.StatusOK {
		t.Fatalf("%d %.200s", code, body)
	}
	eventually(t, 5*time.Second, "carol's audit line", func() bool { return strings.Contains(lastLine(audit.String()), `"carol"`) })
	line = lastLine(audit.String())
	rec = kubeproxy.AuditRecord{}
	if err := json.Unmarshal([]byte(line), &rec); err != nil {
		t.Fatal(err)
	}
	n := len(rec.Groups)
	if len(line) > 12<<10 || n < 2 || rec.Groups[0] != groups[0][:1<<10]+fmt.Sprintf("…(%d bytes)", len(groups[0])) ||
		rec.Groups[n-1] != fmt.Sprintf("…(%d more groups)", len(groups)-(n-1)) {
		t.Errorf("an audit line of %d bytes, with %d groups, the last %q", len(line), n, rec.Groups[n-1])
	}
	t.Logf("the long groups' audit line: %d bytes, %d groups", len(line), n)
}

// TestAuditAfter100Continue: a client that sends
// "Expect: 100-continue" (curl does for large bodies) gets the API server's
// 100 Continue passed on by the proxy, and the audit line must still name
// the final status, not 100.
func TestAuditAfter100Continue(t *testing.T) {
	fc := fakecluster.New(t)
	fc.Srv.Config.Handler.(*http.ServeMux).HandleFunc("/create", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // reading the body sends 100 Continue
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "{}")
	})
	h, audit := proxyHub(t, fc, "")
	c, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := `{"kind":"ConfigMap"}`
	io.WriteString(c, "POST /clusters/open/create HTTP/1.1\r\nHost: hub\r\nAuthorization: Bearer "+aliceToken+
		"\r\nImpersonate-User: admin\r\nExpect: 100-continue\r\nContent-Type: application/json\r\nContent-Length: 20\r\n\r\n"+body)
	br := bufio.NewReader(c)
	var final *http.Response
	for final == nil || final.StatusCode < 200 {
		if final, err = http.ReadResponse(br, nil); err != nil {
			t.Fatal(err)
		}
	}
	if final.StatusCode != http.StatusCreated {
		t.Fatalf("status %d, want 201", final.StatusCode)
	}
	if final.Header.Get("Warning") == "" {
		t.Errorf("the final answer lost the hub's Warning about the Impersonate-* headers removed")
	}
	if line := auditLineOf(t, audit, "/create"); line.Status != http.StatusCreated {
		t.Errorf("the audit line says status %d; the client got 201", line.Status)
	}
}

// TestAuditOfAnAbandonedRequest: a request whose client left before any
// answer came is audited with 499, as nginx logs it, not with the 200 no
// one sent.
func TestAuditOfAnAbandonedRequest(t *testing.T) {
	fc := fakecluster.New(t)
	fc.Srv.Config.Handler.(*http.ServeMux).HandleFunc("/hang", func(w http.ResponseWriter, r *http.Request) {
		fc.Note(r)
		<-r.Context().Done()
	})
	h, audit := proxyHub(t, fc, "")
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		eventually(t, 5*time.Second, "the request at the API server", func() bool { return fc.Count("/hang") > 0 })
		cancel()
	}()
	req, _ := http.NewRequestWithContext(ctx, "GET", h.url+"/clusters/open/hang", nil)
	req.Header.Set("Authorization", "Bearer "+aliceToken)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the request was answered: %s", resp.Status)
	}
	if line := auditLineOf(t, audit, "/hang"); line.Status != kubeproxy.StatusClientClosed {
		t.Errorf("the audit line says status %d for a request no answer reached, want %d", line.Status, kubeproxy.StatusClientClosed)
	}
}

// auditLineOf waits for the audit line of the request to path, and
// returns it.
func auditLineOf(t *testing.T, audit *syncbuf.Buffer, path string) kubeproxy.AuditRecord {
	t.Helper()
	var line kubeproxy.AuditRecord
	eventually(t, 5*time.Second, "the audit line of "+path, func() bool {
		for l := range strings.Lines(audit.String()) {
			if json.Unmarshal([]byte(l), &line) == nil && line.Path == path {
				return true
			}
		}
		return false
	})
	return line
}

// TestWarningOnTheHubsOwnAnswers: the Warning that Impersonate-* headers
// were removed comes once on the answers the hub writes itself too: a
// cluster whose agent isn't connected, and one whose API server can't be
// reached (proxyError), not only on the API server's answers.
func TestWarningOnTheHubsOwnAnswers(t *testing.T) {
	fc := fakecluster.New(t)
	h, _ := proxyHub(t, fc, "")
	as := http.Header{"Impersonate-User": {"admin"}}
	if code, body, answer := call(t, "GET", h.url+"/clusters/far/api", aliceToken, as); code != http.StatusServiceUnavailable || len(answer.Values("Warning")) != 1 {
		t.Errorf("a cluster with no agent: %d %.100s, Warning %q; want 503 and the Warning once", code, body, answer.Values("Warning"))
	}
	fc.Srv.Close() // the agent is connected; its API server is gone
	if code, body, answer := call(t, "GET", h.url+"/clusters/open/api", aliceToken, as); code != http.StatusServiceUnavailable || len(answer.Values("Warning")) != 1 {
		t.Errorf("an API server that can't be reached: %d %.100s, Warning %q; want 503 and the Warning once", code, body, answer.Values("Warning"))
	}
}
