package kubeproxy

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetherhq/tether/internal/gather"
	"github.com/tetherhq/tether/internal/recording"
)

// AuditRecord is one line of the audit log (SPEC section 3). Every field
// SPEC names is on every line: person and groups too, "" and [] for a
// request whose person isn't known (a 401). appendJSON writes it: a field
// added here goes there too (TestAppendJSONWritesEveryField fails until it
// does).
type AuditRecord struct {
	Time    time.Time `json:"time"`
	Person  string    `json:"person"`
	Groups  []string  `json:"groups"` // [] when none, never null (appendJSON)
	Source  string    `json:"source,omitempty"`
	Cluster string    `json:"cluster"`
	Verb    string    `json:"verb"`
	Method  string    `json:"method"`
	Path    string    `json:"path"`
	// Pod, Container, Command, TTY, Stdin and Ports say what an exec,
	// attach or port-forward did, from its path and query (streamaudit.go);
	// they are left out of every other line.
	Pod       string   `json:"pod,omitempty"`
	Container string   `json:"container,omitempty"`
	Command   []string `json:"command,omitempty"`
	TTY       *bool    `json:"tty,omitempty"`
	Stdin     *bool    `json:"stdin,omitempty"`
	Ports     []string `json:"ports,omitempty"`
	Status    int      `json:"status"`
	Duration  float64  `json:"duration"` // seconds
	Bytes     int64    `json:"bytes"`
	RequestID string   `json:"requestId"`
	Remote    string   `json:"remote"`
	// Location is a Location or Content-Location the cluster answered
	// with that pointed off the cluster, which the hub dropped, or for a
	// redirect answered 502 for (redirect.go).
	Location string `json:"location,omitempty"`
	// Ended says why the hub ended a request before its end (open.go):
	// "revoked" or "expired"; "" for every other.
	Ended string `json:"ended,omitempty"`
	// Replica is the hub replica that carried a request to the cluster
	// whose agent it holds, when that is not the one that received it
	// (SPEC section 8); "" for a request this replica carried itself.
	Replica string `json:"replica,omitempty"`
	// Recording is the id of the session's recording (decision 039), its
	// request id; RecordingStopped says why it stopped before the
	// session's end ("behind", "cap", "disk", "unreadable", "unfinished").
	Recording        string `json:"recording,omitempty"`
	RecordingStopped string `json:"recordingStopped,omitempty"`

	// commandMore and portsMore count the arguments and ports setStream
	// read past what the line can hold, and didn't keep: bound says how
	// many there were.
	commandMore, portsMore int
}

// audit writes one line for a request to a cluster, and counts it.
func (px *Proxy) audit(r *http.Request, rt route, cluster string, w *countingWriter, start time.Time) {
	d := time.Since(start)
	// The name comes from the request's path: only names in the agents
	// list become label values, or anyone could grow the metrics without
	// bound.
	label := cluster
	if _, known := px.cfg.Clusters.Entry(cluster); !known {
		label = "unknown"
	}
	px.metrics.requests.WithLabelValues(label, strconv.Itoa(w.status)).Inc()
	px.metrics.requestDuration.WithLabelValues(label).Observe(d.Seconds())
	if px.cfg.Audit == nil {
		return
	}
	path := strings.TrimPrefix(r.URL.Path, px.clusterPrefix(cluster))
	rec := AuditRecord{
		Time:      start.UTC(),
		Person:    rt.person.Name,
		Groups:    rt.person.Groups,
		Source:    rt.person.Source,
		Cluster:   cluster,
		Verb:      verb(r.Method, path, isWatch(path, r.URL.RawQuery)),
		Method:    r.Method,
		Path:      path,
		Status:    w.status,
		Duration:  d.Seconds(),
		Bytes:     w.bytes + w.hijacked.Load(),
		RequestID: rt.id,
		Remote:    r.RemoteAddr,
		Location:  w.location,
		Ended:     w.open.endedWhy(),
	}
	if rt.conn != nil {
		rec.Replica = rt.conn.Replica()
	}
	if w.recorder != nil {
		rec.Recording, rec.RecordingStopped = w.recorder.ID(), w.recStopped
	}
	rec.setStream(path, r.URL.RawQuery)
	rec.bound()
	px.auditMu.Lock()
	px.auditLine = append(rec.appendJSON(px.auditLine[:0]), '\n')
	_, err := px.cfg.Audit.Write(px.auditLine)
	if cap(px.auditLine) > maxKeptAuditLine {
		px.auditLine = nil // a long path's line isn't kept
	}
	px.auditMu.Unlock()
	if err != nil {
		// A full disk, say: the line is lost, so say so, where operators
		// look (the log, rate-limited, and a metric to alert on).
		px.metrics.auditErrors.Inc()
		if suppressed, ok := px.refusals.Allow("audit"); ok {
			px.log.Error("Can't write an audit line", "request", rt.id, "err", err, "suppressed", suppressed)
		}
	}
}

// What an audit line holds of each field. Anyone, signed in or not, may
// send a path, a cluster name or a method of up to a megabyte (the
// server's header limit), and a signed-in person may have hundreds of
// groups: a line keeps the start of each and says how long it was, so one
// request can't write a megabyte to the audit log (issue 33).
const (
	maxAuditPath  = 4 << 10 // the path, after the cluster's prefix
	maxAuditField = 1 << 10 // each other text: person, a group, cluster, verb, method, remote, location, pod, an argument, recording
	// maxAuditGroups, maxAuditCommand and maxAuditPorts are the most bytes
	// of each list a line holds; past it the last entry says how many more
	// there were. A command can be a whole script (sh -c '…').
	maxAuditGroups  = 8 << 10
	maxAuditCommand = 8 << 10
	maxAuditPorts   = 1 << 10
)

// maxAuditLine bounds an audit line, whatever a request brings (about
// 207 KiB): every field at its bound with its mark, each byte escaped as
// \u00XX, and the rest of the line. Lines of ordinary requests are a few
// hundred bytes.
const maxAuditLine = 6*(maxAuditPath+13*maxAuditField+maxAuditGroups+maxAuditCommand+maxAuditPorts+18*len(cutMark)) + 1024

// cutMark is what a cut field ends with: "…(" the length of the whole
// field in bytes " bytes)", as in "/api/v1/namespaces/aaaa…(900000 bytes)".
// A cut list ends with "…(N more groups)", "…(N more arguments)" or
// "…(N more ports)" instead.
const cutMark = "…(1000000000 bytes)"

// bound cuts rec's fields to their bounds, marking each cut (cutMark).
func (rec *AuditRecord) bound() {
	rec.Path = cutField(rec.Path, maxAuditPath)
	for _, f := range []*string{&rec.Person, &rec.Source, &rec.Cluster, &rec.Verb, &rec.Method, &rec.RequestID, &rec.Remote, &rec.Location, &rec.Replica, &rec.Pod, &rec.Container, &rec.Recording, &rec.RecordingStopped} {
		*f = cutField(*f, maxAuditField)
	}
	rec.Groups = boundList(rec.Groups, 0, maxAuditGroups, "groups")
	rec.Command = boundList(rec.Command, rec.commandMore, maxAuditCommand, "arguments")
	rec.Ports = boundList(rec.Ports, rec.portsMore, maxAuditPorts, "ports")
	rec.commandMore, rec.portsMore = 0, 0
}

// boundList cuts each entry of list to maxAuditField and the list to max
// bytes, its last entry then saying how many more there were, more of them
// already left out. The person's own list of groups is shared (with the
// authenticator's remembered tokens): a list to cut is copied.
func boundList(list []string, more, max int, what string) []string {
	total := 0
	for i, g := range list {
		if len(g) <= maxAuditField && total+len(g) <= max {
			total += len(g) + 1
			continue
		}
		out := slices.Clone(list[:i:i])
		for _, g := range list[i:] {
			g = cutField(g, maxAuditField)
			if total+len(g) > max {
				more += len(list) - len(out)
				break
			}
			out = append(out, g)
			total += len(g) + 1
		}
		list = out
		break
	}
	if more == 0 {
		return list
	}
	return append(slices.Clip(list), fmt.Sprintf("…(%d more %s)", more, what))
}

// cutField keeps the first max bytes of s, whole characters only, and says
// how long s was.
func cutField(s string, max int) string {
	if len(s) <= max {
		return s
	}
	return fmt.Sprintf("%s…(%d bytes)", strings.ToValidUTF8(s[:max], ""), len(s))
}

// maxKeptAuditLine is the largest buffer the hub keeps for its next audit
// line: one for any line that holds no long path or long names.
const maxKeptAuditLine = 2 << 10

// verb names what a request does in Kubernetes' words, from its method and
// path alone: /api/v1/namespaces/a/pods is a list, /api/v1/namespaces/a/pods/p
// a get.
func verb(method, path string, watch bool) string {
	switch method {
	case http.MethodGet, http.MethodHead:
		if watch {
			return "watch"
		}
		parts := resourceParts(path)
		if len(parts) == 1 {
			return "list"
		}
		return "get"
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		parts := resourceParts(path)
		if len(parts) == 1 {
			return "deletecollection"
		}
		return "delete"
	}
	return strings.ToLower(method)
}

// resourceParts returns the path after the API group and version, and after
// namespaces/<ns> for a namespaced resource: [pods] or [pods, p, log].
func resourceParts(path string) []string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return nil
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	return parts
}

// countingWriter records a response's status and size for the audit log.
// Unwrap lets http.ResponseController reach Flush underneath.
type countingWriter struct {
	http.ResponseWriter
	status      int
	bytes       int64
	wroteHeader bool
	// gone is closed when the client has left (the request's context):
	// an answer whose head comes after that reached no one.
	gone <-chan struct{}
	// hijacked counts what is written to the client's connection after an
	// upgrade (exec, attach, port-forward): the proxy's two copies write
	// it, and the second may still run as the handler returns.
	hijacked atomic.Int64
	upgraded bool // the connection was hijacked
	// location is the Location the hub dropped from the answer, for the
	// audit line (AuditRecord.Location).
	location string
	// gather is the client's connection under TLS, for an HTTP/1 request
	// on the hub's own server; nil otherwise. While an answer of unknown
	// length is written, it holds what the server writes from a write to
	// the flush after it (gather.go).
	gather *gather.Conn
	// sessions, when set, holds the client's connection once hijacked,
	// for the hub to close at the end (conn); ServeHTTP takes it off.
	sessions *sessionSet
	conn     net.Conn
	// open, when set, is the request's entry in the hub's open requests
	// (open.go): it closes the client's connection to end the session, and
	// says why the hub ended the request, for the audit line.
	open *openRequest
	// plan is the recording an exec or attach is to get (record.go),
	// proto its protocol once the API server's 101 agreed on one; the
	// recorder is started as the connection is taken over, and its
	// Close says why it stopped, for the audit line.
	plan       *recordingPlan
	proto      recording.Protocol
	recorder   *recording.Recorder
	recStopped string
}

// flush sends what the handler wrote and the server still buffers, unless
// the connection was taken over or nothing was written.
func (w *countingWriter) flush() {
	if w.wroteHeader && !w.upgraded {
		w.FlushError()
	}
}

// FlushError flushes the server's buffers, then sends what the connection
// gathered meanwhile. http.ResponseController, and so the proxy, calls it.
func (w *countingWriter) FlushError() error {
	err := http.NewResponseController(w.ResponseWriter).Flush()
	if w.gather != nil {
		if rerr := w.gather.Release(); err == nil {
			err = rerr
		}
	}
	return err
}

// Hijack takes the client's connection over for an upgrade, which the
// proxy does only on the API server's 101, and counts what is written to
// it from then on.
func (w *countingWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if w.gather != nil {
		w.gather.Release()
		w.gather = nil
	}
	conn, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	w.upgraded = true
	if !w.wroteHeader {
		w.status, w.wroteHeader = http.StatusSwitchingProtocols, true
	}
	cc := &countedConn{Conn: conn, n: &w.hijacked}
	if w.plan != nil && w.proto != 0 {
		w.recorder = w.plan.store.Start(w.plan.meta, w.proto)
		cc.rec = w.recorder
	}
	if w.sessions != nil {
		w.conn = cc
		w.sessions.add(cc)
	}
	if w.open != nil {
		w.open.hijacked(cc)
	}
	return cc, brw, nil
}

// sessionSet holds the clients' connections that upgrades took over (exec,
// attach, port-forward) while their requests run. The HTTP server doesn't
// track a hijacked connection, and the end of the agent's tunnel doesn't
// end every session: a copy to a client that has stopped reading waits on
// the client's socket, not the tunnel. So the hub closes those still open
// when it closes.
type sessionSet struct {
	mu     sync.Mutex // guards the following
	conns  map[net.Conn]struct{}
	closed bool
}

// add takes c in, or closes it at once once the set is closed.
func (s *sessionSet) add(c net.Conn) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.Close()
		return
	}
	if s.conns == nil {
		s.conns = map[net.Conn]struct{}{}
	}
	s.conns[c] = struct{}{}
	s.mu.Unlock()
}

func (s *sessionSet) remove(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// close closes every connection in the set, and those added from now on.
func (s *sessionSet) close() {
	s.mu.Lock()
	conns := s.conns
	s.conns, s.closed = nil, true
	s.mu.Unlock()
	for c := range conns {
		c.Close()
	}
}

// countedConn adds what is written to it to n, and hands what goes
// either way to the session's recorder, when it has one: the recorder
// copies, and never waits.
type countedConn struct {
	net.Conn
	n   *atomic.Int64
	rec *recording.Recorder
}

func (c *countedConn) Write(b []byte) (int, error) {
	if c.rec != nil {
		// Before the write: once the client has it, it may answer, and
		// the answer (read on another goroutine) must not be recorded
		// before what it answers.
		c.rec.Server(b)
	}
	k, err := c.Conn.Write(b)
	c.n.Add(int64(k))
	return k, err
}

func (c *countedConn) Read(b []byte) (int, error) {
	k, err := c.Conn.Read(b)
	if c.rec != nil && k > 0 {
		c.rec.Client(b[:k])
	}
	return k, err
}

func (w *countingWriter) WriteHeader(code int) {
	// A 1xx (100 Continue, 103 Early Hints) the proxy passes on comes
	// before the answer: the answer's status is the one to record.
	if !w.wroteHeader && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.status, w.wroteHeader = code, true
		select {
		case <-w.gone:
			// The client left before the answer came (and the API server
			// may have answered because the stream ended): audited as 499,
			// not as a status no one got.
			w.status = StatusClientClosed
		default:
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *countingWriter) Write(b []byte) (int, error) {
	w.wroteHeader = true
	if w.gather != nil && w.Header().Get("Content-Length") == "" {
		// An answer of unknown length: the proxy flushes after this write.
		w.gather.Hold()
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

func (w *countingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
