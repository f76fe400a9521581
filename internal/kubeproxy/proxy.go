package kubeproxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tetherhq/tether/internal/hostport"

	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/hub"
	"github.com/tetherhq/tether/internal/protocol"
	"github.com/tetherhq/tether/internal/recording"
)

// RequestIDHeader carries each request's id to the API server, as a user
// extra, so the cluster's own audit log names it (SPEC section 3). The
// agent's impersonation role allows exactly this one extra.
const RequestIDHeader = "Impersonate-Extra-Tether-Request-Id"

// StrictRequestIDHeader carries the request id to a cluster whose owner's
// ceiling holds (strictMode), as the user extra tetherhq.github.io/request-id:
// constrained impersonation takes only extras whose keys are
// domain-prefixed, and refuses the whole request otherwise (decision 027).
const StrictRequestIDHeader = "Impersonate-Extra-Tetherhq.github.io%2frequest-id"

// clusterKey is the context key under which a proxied request carries its
// route: which agent connection, and as whom.
type clusterKey struct{}

type route struct {
	conn   hub.Upstream
	entry  fleet.Agent
	person auth.Person
	user   string   // impersonated, prefixed
	groups []string // impersonated, prefixed
	id     string   // request id
	warn   bool     // the client sent Impersonate-* headers: the answer says they were removed
	// answer is where the answer goes, for what the proxy's hooks tell the
	// audit line.
	answer *countingWriter
}

// ServeHTTP proxies a person's request to a cluster's API server:
// <base>/clusters/<name>/<path> goes to <path> on the API server, through
// the cluster's tunnel, as the person. The router gives the name as the
// path value "cluster".
func (px *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Counted until the answer is done, an upgraded session's whole life
	// included: the HTTP server's Shutdown doesn't wait for hijacked
	// connections, and a stopping hub must let exec sessions finish too.
	px.requests.add()
	defer px.requests.done()
	start := time.Now()
	rw := &countingWriter{ResponseWriter: w, status: http.StatusOK, gone: r.Context().Done(), gather: gatherConnOf(r.Context(), r.ProtoMajor), sessions: &px.sessions}
	name := r.PathValue("cluster")
	rt := route{id: newRequestID(), answer: rw}
	defer func() {
		if rw.conn != nil {
			px.sessions.remove(rw.conn) // closed by the proxy as it returned
		}
		rw.flush() // the answer goes out before the audit line is written
		if rw.recorder != nil {
			rw.recStopped = rw.recorder.Close()
		}
		px.audit(r, rt, name, rw, start)
	}()

	p, ok, err := px.cfg.Auth.Authenticate(r)
	if err != nil || !ok {
		if err != nil {
			px.LogAuthFailure(r, err)
		}
		if refusedIdentity(err) {
			WriteStatus(rw, http.StatusForbidden, "Forbidden", err.Error())
			return
		}
		rw.Header().Set("WWW-Authenticate", `Bearer realm="tether"`)
		WriteStatus(rw, http.StatusUnauthorized, "Unauthorized", Unauthorized(err))
		return
	}
	rt.person = p
	if p.Source == auth.SourceProxy && auth.FromOtherSite(r, px.cfg.PublicURL, false) {
		// The auth proxy's headers come from its own cookie, in a browser:
		// another site's page must not open an exec or port-forward
		// WebSocket (no CORS stands in its way) as the person, nor send a
		// pod's app a GET it acts on (an <img>, or a link: navigations too,
		// as a page of a cluster is no place to land from elsewhere).
		WriteStatus(rw, http.StatusForbidden, "Forbidden", "Requests from other sites are refused: open the address itself, or follow it from the hub's own page.")
		return
	}
	if p.Source == auth.SourceProxy && auth.BrowserWithoutFetchMetadata(r) {
		// Its <img> from another site's page would carry the proxy's
		// cookie and neither Origin nor Fetch Metadata (decision 026).
		WriteStatus(rw, http.StatusForbidden, "Forbidden", "This browser sends no Sec-Fetch-Site, so the hub can't tell its requests from those another site's page makes: open the address in a current browser, over HTTPS, or use kubectl.")
		return
	}
	entry, visible := px.visible(name, p)
	if !visible {
		// A cluster someone may not see answers exactly like one that
		// doesn't exist.
		WriteStatus(rw, http.StatusNotFound, "NotFound", fmt.Sprintf("Tether has no cluster %q.", name))
		return
	}
	rt.entry = entry
	if sentImpersonation(r.Header) {
		// Set here for the hub's own answers below. A proxied answer gets
		// it in ModifyResponse instead, since a 1xx passed on before the
		// answer (100 Continue) clears the headers set here.
		rt.warn = true
		rw.Header().Add("Warning", ImpersonationWarning)
	}
	if !entry.ForwardToken {
		rt.user, rt.groups = px.cfg.AuthConfig.Impersonated(p)
		if err := auth.CheckIdentity(rt.user, rt.groups); err != nil {
			WriteStatus(rw, http.StatusForbidden, "Forbidden", err.Error())
			return
		}
	} else if p.Bearer == "" {
		WriteStatus(rw, http.StatusForbidden, "Forbidden", fmt.Sprintf("Cluster %q takes your own token (forwardToken), and you signed in without one the cluster could check.", name))
		return
	}
	rt.conn = px.cfg.Clusters.Reach(name)
	if rt.conn == nil {
		if st, ok := px.cfg.Clusters.Cluster(name); ok && !st.LastSeen.IsZero() && time.Since(st.LastSeen) < comingBack {
			// Its agent was here a moment ago: a replica that held it
			// went, or it is reconnecting. client-go waits and sends the
			// request again, so people see no failure if it is back.
			rw.Header().Set("Retry-After", "1")
		}
		WriteStatus(rw, http.StatusServiceUnavailable, "ServiceUnavailable", fmt.Sprintf("Cluster %q is Unreachable: %s", name, hub.MessageNotConnected))
		return
	}
	if proxy, _ := rt.conn.Halves(); !proxy {
		// The agent would refuse the stream (and the hub opens none):
		// say so before anything is counted or sent.
		WriteStatus(rw, http.StatusServiceUnavailable, "ServiceUnavailable", fmt.Sprintf(MessageProxyOff, name))
		return
	}
	if ceiling, why := rt.conn.Ceiling(); ceiling == protocol.CeilingUnavailable && !entry.ForwardToken {
		// Its API server would refuse the request, in words about
		// impersonation: say what the cluster's owner must fix instead.
		WriteStatus(rw, http.StatusServiceUnavailable, "ServiceUnavailable", fmt.Sprintf("Cluster %q is Unreachable: %s", name, why))
		return
	}
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	open := &openRequest{cluster: name, person: p, user: rt.user, groups: rt.groups, cancel: cancel,
		kind: openKindOf(r, strings.TrimPrefix(r.URL.Path, px.clusterPrefix(name)))}
	if limit := px.openLimit(p, open.kind); !px.track(open, limit) {
		px.openTooMany(rw, name, open.kind, limit)
		return
	}
	defer px.open.remove(open)
	rw.open = open
	rw.plan = px.planRecording(r, name, rt.id, p)
	rw.Header().Del("Warning") // ModifyResponse or proxyError adds it again
	// The body goes to the API server, for as long as it takes
	// (CloseUnreadBodies); a request with none, most, costs nothing here.
	if bodyBounded(r) {
		rw.Header().Del("Connection")
		http.NewResponseController(w).SetReadDeadline(time.Time{})
	}
	px.proxy.ServeHTTP(rw, r.WithContext(context.WithValue(ctx, clusterKey{}, rt)))
}

// comingBack is how long after its agent was last heard from a cluster
// without one is answered with Retry-After: about the time agents take to
// connect to another replica after theirs is killed (issue 35: 20 s).
const comingBack = 30 * time.Second

// MessageProxyOff is the 503 Status message, given the cluster's name, of
// a request to a cluster whose agent runs without the proxy.
const MessageProxyOff = "Cluster %q takes no requests through Tether: its agent runs without the proxy (TETHER_PROXY=false, the chart's proxy.enabled: false). The hub still shows its status and inventory."

// ImpersonationWarning answers a request that came with Impersonate-*
// headers, which the hub removes (SPEC section 3): kubectl prints it, so
// someone who tried --as learns that the request went as themselves.
const ImpersonationWarning = `299 - "Tether removed the Impersonate-* headers you sent: requests go to the cluster as you, so --as, --as-group and --as-uid have no effect here"`

func sentImpersonation(h http.Header) bool {
	for k := range h {
		if len(k) >= len("impersonate-") && strings.EqualFold(k[:len("impersonate-")], "impersonate-") {
			return true
		}
	}
	return false
}

// refusedIdentity reports whether Authenticate knew who the person is but
// refused their name or groups (SPEC section 3: control or invisible
// characters, a fullwidth colon): a 403 that says why, as for "system:"
// names, not a 401 that asks them to sign in again with the same result.
func refusedIdentity(err error) bool { return errors.Is(err, auth.ErrIdentity) }

// Unauthorized says why a request to a cluster was refused, where the
// person can do something about it and the answer tells nothing of anyone
// else: their token's time is up, or the hub that signed it has another
// key now (a dev hub restarted, say). kubectl prints it.
func Unauthorized(err error) string {
	const who = "Tether doesn't know who you are: "
	switch {
	case errors.Is(err, auth.ErrExpired):
		return who + "your token has expired. Sign in again, or get a new kubeconfig from the hub's fleet page."
	case errors.Is(err, auth.ErrOtherKey):
		return who + "your token was signed with a key this hub no longer has (it restarted without a lasting key, or its key was replaced). Get a new kubeconfig from the hub's fleet page."
	}
	return who + "send a bearer token the hub accepts (the kubeconfig from the hub's fleet page holds one)."
}

// visible returns the list entry of cluster name if p may see it.
func (px *Proxy) visible(name string, p auth.Person) (fleet.Agent, bool) {
	entry, ok := px.cfg.Clusters.Entry(name)
	if !ok || !entry.Groups.Allows(p.Groups) {
		return fleet.Agent{}, false
	}
	return entry, true
}

// newProxy builds the reverse proxy every cluster shares. Rewrite, not
// Director: ReverseProxy strips hop-by-hop headers (and those named in
// Connection) before Rewrite runs, so nothing can strip the headers Rewrite
// sets, and nothing the client named survives.
func (px *Proxy) newProxy() *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite:    px.rewrite,
		Transport:  clusterTransport{},
		BufferPool: &copyBuffers{},
		// No FlushInterval: answers of unknown length (watches, logs -f)
		// and event streams are flushed after every write all the same
		// (ReverseProxy gives them -1), and answers of known length go out
		// in one write when they end. With -1 for all, every answer also
		// started a timer's goroutine that flushed the head on its own,
		// and contended with the answer's writes for their lock.
		ModifyResponse: func(resp *http.Response) error {
			if resp.StatusCode < 100 {
				// 000 to 099 parse, but are no answer: passed on, the
				// server's WriteHeader panics on them.
				return fmt.Errorf("the API server answered with status %03d", resp.StatusCode)
			}
			rt, _ := resp.Request.Context().Value(clusterKey{}).(route)
			if dropped, offCluster := px.confineLocations(resp, rt); dropped != "" {
				if rt.answer != nil {
					rt.answer.location = dropped // cut by the audit line (AuditRecord.bound)
				}
				if offCluster {
					px.logRefusedRedirect(rt)
					refuseRedirect(resp, rt.conn.Cluster(), dropped)
				}
			}
			sandbox(resp.Header)
			if rt.warn {
				resp.Header.Add("Warning", ImpersonationWarning)
			}
			closeFailedUpgrades(resp)
			if rt.answer != nil && rt.answer.plan != nil && resp.StatusCode == http.StatusSwitchingProtocols {
				rt.answer.proto, _ = recording.ProtocolOf(resp.Header.Get("Upgrade"), resp.Header.Get("Sec-Websocket-Protocol"))
			}
			px.trackWatch(resp)
			return nil
		},
		ErrorHandler: px.proxyError,
		// What ErrorHandler doesn't see: a response cut short because the
		// tunnel or the API server stopped sending midway.
		ErrorLog: slog.NewLogLogger(px.log.Handler(), slog.LevelWarn),
	}
}

// sandbox keeps what a cluster answers from acting as the hub in a
// browser. A service or pod proxy passes on whatever a pod serves, from the
// hub's own address, where the person's browser holds the hub's session
// and any auth proxy's cookie: a pod's page opened there, by someone the
// auth proxy signs in, ran as one of the hub's (its script could fetch
// their kubeconfig, or call every cluster as them). So the answer sets and
// clears no cookies of the hub's address, and the browser treats it as
// from an origin of its own (CSP sandbox), which the hub's Origin checks
// refuse. The Kubernetes API's clients don't read either header.
func sandbox(h http.Header) {
	h.Del("Set-Cookie")
	h.Del("Clear-Site-Data")
	h.Add("Content-Security-Policy", "sandbox")
}

// copyBuffers lends the proxy its 32 KiB buffers for copying answers.
// Without them it made one per answer: in the bench's small GETs, 82 % of
// what the hub allocated (48 MB in a run of 1,200 GETs; 18 MB with them).
type copyBuffers struct{ pool sync.Pool }

func (p *copyBuffers) Get() []byte {
	if b, ok := p.pool.Get().(*[]byte); ok {
		return *b
	}
	return make([]byte, 32<<10)
}

func (p *copyBuffers) Put(b []byte) { p.pool.Put(&b) }

func (px *Proxy) rewrite(pr *httputil.ProxyRequest) {
	rt := pr.In.Context().Value(clusterKey{}).(route)
	out := pr.Out
	prefix := px.clusterPrefix(rt.conn.Cluster())
	rest := strings.TrimPrefix(pr.In.URL.Path, prefix)
	if !strings.HasPrefix(rest, "/") {
		rest = "/" + rest
	}
	// The path as the client escaped it, when that differs from the
	// decoded one: an escaped slash (a%2Fb in a service proxy's path) must
	// reach the API server escaped. url.URL uses RawPath only while it
	// decodes to Path, and escapes Path itself otherwise.
	//
	// The prefix is trimmed segment by segment, decoded: a client may
	// escape it too (/clusters/a%2Db for a-b), and trimmed as written it
	// would be missed, and the rest's escaping lost with it.
	rawRest, ok := trimEscapedPrefix(pr.In.URL.RawPath, prefix)
	if !ok || !strings.HasPrefix(rawRest, "/") {
		rawRest = ""
	}
	host := rt.conn.Host()
	out.URL = &url.URL{Scheme: "https", Host: host, Path: rest, RawPath: rawRest, RawQuery: pr.In.URL.RawQuery}
	out.Host = host

	// Nothing that could speak for someone else gets through, whatever its
	// case: Go canonicalizes header names, so a lower-cased key is compared
	// lower-cased. The auth proxy's configured headers neither.
	proxyHeaders := px.cfg.Auth.ProxyHeaders()
	for k := range out.Header {
		if lk := strings.ToLower(k); isRemoved(lk) ||
			slices.ContainsFunc(proxyHeaders, func(p string) bool { return strings.EqualFold(p, k) }) {
			delete(out.Header, k)
		}
	}
	dropBearerProtocols(out.Header)
	if rt.entry.ForwardToken {
		out.Header.Set("Authorization", "Bearer "+rt.person.Bearer)
		return
	}
	out.Header.Set("Authorization", rt.conn.ServiceAccountAuth())
	out.Header.Set("Impersonate-User", rt.user)
	for _, g := range rt.groups {
		out.Header.Add("Impersonate-Group", g)
	}
	if ceiling, _ := rt.conn.Ceiling(); ceiling == protocol.CeilingEnforced {
		out.Header.Set(StrictRequestIDHeader, rt.id)
	} else {
		out.Header.Set(RequestIDHeader, rt.id)
	}
}

// isRemoved reports whether lk, a lower-cased header name, never reaches
// an API server from a client:
//   - credentials and impersonation, which only the hub sets;
//   - X-Forwarded-For and X-Real-Ip: the cluster has no use for people's
//     addresses, and its audit log would take the client's word for its own
//     (sourceIPs);
//   - Audit-Id, which the API server takes as its audit event's id: a
//     person must not choose that of theirs, or give it another's (the
//     hub's own id goes as RequestIDHeader);
//   - the headers in which well-known authenticating proxies hand the app
//     behind them the person's tokens, or a signed statement of who they
//     are (oauth2-proxy, Pomerium, Google IAP, Cloudflare Access, AWS ALB,
//     Azure App Service). The API server passes request headers on to what
//     it proxies (services/…/proxy): a pod would get them, and could replay
//     them to every app behind the same proxy.
func isRemoved(lk string) bool {
	switch lk {
	case "authorization", "cookie",
		"x-forwarded-for", "x-real-ip", "audit-id",
		"x-forwarded-access-token", "x-auth-request-access-token", "x-forwarded-id-token",
		"x-pomerium-jwt-assertion", "x-goog-iap-jwt-assertion", "cf-access-jwt-assertion",
		"x-amzn-oidc-accesstoken", "x-amzn-oidc-data", "x-ms-client-principal":
		return true
	}
	return strings.HasPrefix(lk, "impersonate-") || strings.HasPrefix(lk, "x-ms-token-")
}

// bearerProtocol starts the WebSocket subprotocol in which Kubernetes
// takes a bearer token, for browsers, which can't send Authorization.
const bearerProtocol = "base64url.bearer.authorization.k8s.io."

// dropBearerProtocols removes the bearer tokens from a WebSocket upgrade's
// subprotocols: a credential like Authorization, which the API server tries
// when the Authorization the hub sends fails. The others, which choose the
// stream protocol (v5.channel.k8s.io), stay.
func dropBearerProtocols(h http.Header) {
	const key = "Sec-Websocket-Protocol"
	vs := h.Values(key)
	if len(vs) == 0 {
		return
	}
	var kept []string
	for _, v := range vs {
		for p := range strings.SplitSeq(v, ",") {
			p = strings.TrimSpace(p)
			if p != "" && !(len(p) >= len(bearerProtocol) && strings.EqualFold(p[:len(bearerProtocol)], bearerProtocol)) {
				kept = append(kept, p)
			}
		}
	}
	h.Del(key)
	if len(kept) > 0 {
		h.Set(key, strings.Join(kept, ", "))
	}
}

// trimEscapedPrefix returns what follows prefix, a decoded path, in
// escaped, a path as a client escaped it: the segments of escaped that
// decode to those of prefix are cut. ok is false when they don't.
func trimEscapedPrefix(escaped, prefix string) (rest string, ok bool) {
	rest = escaped
	for seg := range strings.SplitSeq(strings.TrimPrefix(prefix, "/"), "/") {
		if !strings.HasPrefix(rest, "/") {
			return "", false
		}
		rest = rest[1:]
		end := strings.IndexByte(rest, '/')
		if end < 0 {
			end = len(rest)
		}
		if got, err := url.PathUnescape(rest[:end]); err != nil || got != seg {
			return "", false
		}
		rest = rest[end:]
	}
	return rest, true
}

func (px *Proxy) clusterPrefix(name string) string {
	return strings.TrimSuffix(px.cfg.BasePath, "/") + "/clusters/" + name
}

// clusterTransport sends a request through the tunnel of the connection
// its route names. The connection's own transport does TLS to the API
// server inside the stream, and follows no redirects.
type clusterTransport struct{}

func (clusterTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rt := r.Context().Value(clusterKey{}).(route)
	return rt.conn.RoundTrip(r)
}

// closeFailedUpgrades closes the client's connection after an upgrade the
// API server refused, so bytes the client sends next (SPDY frames, say)
// never reach anything.
func closeFailedUpgrades(resp *http.Response) {
	if resp.Request.Header.Get("Upgrade") != "" && resp.StatusCode != http.StatusSwitchingProtocols {
		resp.Close = true
		resp.Header.Set("Connection", "close")
	}
}

// StatusClientClosed is what the audit line and metrics record for a
// request whose client left before the answer: nginx's 499, as no status
// went out.
const StatusClientClosed = 499

func (px *Proxy) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	rt, _ := r.Context().Value(clusterKey{}).(route)
	if errors.Is(err, context.Canceled) {
		// The client went away.
		if cw, ok := w.(*countingWriter); ok && !cw.wroteHeader {
			cw.status = StatusClientClosed
		}
		return
	}
	name := ""
	if rt.conn != nil {
		name = rt.conn.Cluster()
	}
	if rt.warn {
		w.Header().Add("Warning", ImpersonationWarning)
	}
	var limit *hub.StreamLimitError
	if errors.As(err, &limit) {
		// Not logged: the metric and the audit line count them, and a
		// flood would flood the log too. client-go waits Retry-After and
		// sends the request again.
		w.Header().Set("Retry-After", fmt.Sprint(streamRetryAfter))
		WriteStatus(w, http.StatusTooManyRequests, "TooManyRequests", "Tether refused the request: "+limit.Error()+".")
		return
	}
	px.log.Warn("A request to a cluster failed", "cluster", name, "request", rt.id, "err", hub.ShownText(err.Error(), hub.MaxStatusMessage))
	WriteStatus(w, http.StatusServiceUnavailable, "ServiceUnavailable", fmt.Sprintf("Tether can't reach cluster %q's API server: %s", name, hub.ShownText(err.Error(), hub.MaxStatusMessage)))
}

// streamRetryAfter is the Retry-After, in seconds, of a request refused at
// MaxStreamsPerAgent.
const streamRetryAfter = 5

// WriteStatus answers with a Kubernetes Status object, which kubectl shows
// as a readable error.
func WriteStatus(w http.ResponseWriter, code int, reason, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	w.Write(statusBody(code, reason, message))
}

// statusBody is a Kubernetes Status object, as JSON.
func statusBody(code int, reason, message string) []byte {
	b, _ := json.Marshal(map[string]any{
		"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{},
		"status": "Failure", "message": message, "reason": reason, "code": code,
	})
	return append(b, '\n')
}

func newRequestID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// LogAuthFailure logs a refused credential, rate-limited per address.
func (px *Proxy) LogAuthFailure(r *http.Request, err error) {
	host, _ := hostport.Host(r.RemoteAddr)
	if suppressed, ok := px.refusals.Allow("person\x00" + host); ok {
		px.log.Warn("A request was refused", "remote", r.RemoteAddr, "err", err, "suppressed", suppressed)
	}
}
