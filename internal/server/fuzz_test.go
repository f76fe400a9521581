package server

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/kubeproxy"
	"github.com/tetherhq/tether/internal/pki"
	"github.com/tetherhq/tether/internal/protocol"
	"github.com/tetherhq/tether/internal/testutil/syncbuf"
)

// FuzzAgentUpgradeHeaders: whatever name and Authorization an upgrade
// request carries, the hub admits only the listed name with its token, and
// its log lines quote the name.
func FuzzAgentUpgradeHeaders(f *testing.F) {
	for _, s := range [][2]string{
		{"eu-1", "Bearer " + testToken}, {"eu-1", "Bearer  " + testToken + " "}, {"eu-1", "bearer " + testToken},
		{"EU-1", "Bearer " + testToken}, {"eu-1\n", "Bearer " + testToken}, {"", ""}, {"eu-1", testToken},
		{"x\"\nINFO forged line", "Bearer x"}, {strings.Repeat("n", 300), "Bearer " + strings.Repeat("t", 5000)},
	} {
		f.Add(s[0], s[1])
	}
	logs := &syncbuf.Buffer{}
	h, err := New(Config{Agents: testAgents("eu-1"), Logger: slogTo(logs)})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, name, authz string) {
		logs.Reset()
		r := httptest.NewRequest("GET", "/api/agent", nil)
		r.Header["Tether-Agent"] = []string{name}
		r.Header["Authorization"] = []string{authz}
		w := httptest.NewRecorder()
		h.serveAgent(w, r)
		// The hub takes the token with or without "Bearer ".
		token, _ := strings.CutPrefix(authz, "Bearer ")
		match := name == "eu-1" && strings.TrimSpace(token) == testToken
		if match != (w.Code != http.StatusUnauthorized) {
			t.Fatalf("name %q, Authorization %q: %d", name, authz, w.Code)
		}
		for _, line := range strings.Split(strings.TrimSuffix(logs.String(), "\n"), "\n") {
			if line != "" && !strings.Contains(line, "An agent was refused") && !strings.Contains(line, "upgrade") {
				t.Fatalf("an unexpected log line: %q", line)
			}
		}
		if strings.Contains(logs.String(), testToken) {
			t.Fatal("the token reached the log")
		}
	})
}

// FuzzRewrite: whatever headers a person sends, the request the API server
// gets carries exactly the hub's credentials and impersonation, and none of
// the person's.
func FuzzRewrite(f *testing.F) {
	f.Add("Authorization", "Bearer stolen", "Impersonate-User", "system:admin", "alice", "dev")
	f.Add("authorization", "x", "impersonate-group", "system:masters", "bob", "ops")
	f.Add("Cookie", "s=1", "IMPERSONATE-EXTRA-SCOPES", "x", "carol", "")
	f.Add("X-Remote-User", "admin", "x-remote-group", "system:masters", "dave", "a")
	f.Add("Tether-Request-Id", "forged", "Impersonate-Uid", "0", "erin", "b")
	h := fuzzHub(f, auth.Config{Users: testUsers, ProxyUserHeader: "X-Remote-User", ProxyGroupsHeader: "X-Remote-Group",
		ProxyTrusted: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	conn := &agentConn{hub: h, name: "c", saAuth: authorization("service-account-token")}
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, user, group string) {
		in := httptest.NewRequest("GET", "/clusters/c/api", nil)
		in.Header[k1] = append(in.Header[k1], v1)
		in.Header[k2] = append(in.Header[k2], v2)
		in.Header[http.CanonicalHeaderKey(k1)] = append(in.Header[http.CanonicalHeaderKey(k1)], v1)
		rt := route{conn: conn, user: user, groups: []string{group}, id: "id-1"}
		in = in.WithContext(context.WithValue(in.Context(), clusterKey{}, rt))
		pr := &httputil.ProxyRequest{In: in, Out: in.Clone(in.Context())}
		h.rewrite(pr)
		got := pr.Out.Header
		for k, vs := range got {
			lk := strings.ToLower(k)
			switch {
			case lk == "authorization":
				if k != "Authorization" || !slices.Equal(vs, []string{"Bearer service-account-token"}) {
					t.Fatalf("%s: %q", k, vs)
				}
			case lk == "impersonate-user":
				if k != "Impersonate-User" || !slices.Equal(vs, []string{user}) {
					t.Fatalf("%s: %q, want %q", k, vs, user)
				}
			case lk == "impersonate-group":
				if k != "Impersonate-Group" || !slices.Equal(vs, []string{group}) {
					t.Fatalf("%s: %q, want %q", k, vs, group)
				}
			case lk == strings.ToLower(kubeproxy.RequestIDHeader):
				if !slices.Equal(vs, []string{"id-1"}) {
					t.Fatalf("%s: %q", k, vs)
				}
			case lk == "cookie" || strings.HasPrefix(lk, "impersonate-") || lk == "x-remote-user" || lk == "x-remote-group" || lk == "x-forwarded-for":
				t.Fatalf("the person's %s reached the API server: %q", k, vs)
			}
		}
		if got.Get("Authorization") == "" || got.Get("Impersonate-User") != user {
			t.Fatalf("the hub's own headers are missing: %v", got)
		}
	})
}

// FuzzCheckHello: a hello the hub accepts has a short printable version and
// a host:port address.
func FuzzCheckHello(f *testing.F) {
	for _, s := range [][2]string{
		{"v0.1.0", "10.96.0.1:443"}, {"", "[fd00::1]:6443"}, {"v1\nINFO forged", "h:1"}, {strings.Repeat("v", 200), "h:1"},
		{"v1", "h"}, {"v1", ":443"}, {"v1", "h:0"}, {"v1", "h:65536"}, {"v1", "h :1"}, {"v1", "h:+1"}, {"\xff", "h:1"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, version, apiServer string) {
		err := checkHello(protocol.Message{Type: protocol.TypeHello, AgentVersion: version, APIServer: apiServer})
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error on more than one line: %q", err)
			}
			return
		}
		if len(version) > maxAgentVersion || strings.ContainsFunc(version, unicode.IsControl) {
			t.Fatalf("accepted the version %q", version)
		}
		if strings.ContainsFunc(apiServer, unicode.IsControl) || !strings.Contains(apiServer, ":") {
			t.Fatalf("accepted the address %q", apiServer)
		}
	})
}

// FuzzParseQuery: any query string on the resources API gives a query of a
// known kind, or an error on one line for the person who wrote it; a label
// selector accepted is one that matches consistently.
func FuzzParseQuery(f *testing.F) {
	for _, s := range []string{
		"kind=pods", "kind=pods&namespace=a&labelSelector=app%3Dx,tier!%3Dweb&ready=false", "kind=nope", "",
		"kind=pods&labelSelector=a+in+(x,y),!b", "kind=pods&labelSelector=%3D%3D%3D", "kind=pods&ready=TRUE",
		"kind=pods&labelSelector=" + strings.Repeat("a", 300) + "%3Db", "kind=pods&kind=nodes", "%zz", "kind=pods&namespace=Not_A_Name",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, rawQuery string) {
		r := httptest.NewRequest("GET", "/api/resources", nil)
		r.URL.RawQuery = rawQuery
		q, err := parseQuery(r)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error on more than one line: %q", err)
			}
			return
		}
		if q.Kind == "" {
			t.Fatalf("accepted %q without a kind", rawQuery)
		}
		if q.Namespace != "" && len(validation.IsDNS1123Label(q.Namespace)) > 0 {
			t.Fatalf("accepted namespace %q, which no namespace can be named", q.Namespace)
		}
		if q.Selector != nil {
			// What the selector prints parses back to the same selector.
			again, err := labels.Parse(q.Selector.String())
			if err != nil || again.String() != q.Selector.String() {
				t.Fatalf("selector %q prints as %q, which parses to %v, %v", rawQuery, q.Selector, again, err)
			}
		}
	})
}

// FuzzParseCA: the hub keeps a hello's caCert as the DER of the
// certificates in it, and accepts and trusts exactly what
// x509.CertPool.AppendCertsFromPEM would.
func FuzzParseCA(f *testing.F) {
	ca, err := pki.NewCA("fuzz CA", time.Hour)
	if err != nil {
		f.Fatal(err)
	}
	other, err := pki.NewCA("other CA", time.Hour)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(ca.CertPEM)
	f.Add(append(append([]byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"), ca.CertPEM...), other.CertPEM...))
	f.Add([]byte("-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n"))
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nProc-Type: 4,ENCRYPTED\n\nAAAA\n-----END CERTIFICATE-----\n"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, data []byte) {
		got := parseCA(data)
		want := x509.NewCertPool()
		if ok := want.AppendCertsFromPEM(data); ok != (len(got) > 0) {
			t.Fatalf("AppendCertsFromPEM says %v, parseCA found %d certificates", ok, len(got))
		}
		pool := x509.NewCertPool()
		for _, der := range got {
			cert, err := x509.ParseCertificate(der)
			if err != nil {
				t.Fatalf("parseCA kept DER that doesn't parse: %v", err)
			}
			pool.AddCert(cert)
		}
		if !pool.Equal(want) {
			t.Fatal("parseCA trusts other certificates than AppendCertsFromPEM")
		}
	})
}

// FuzzRewritePath: whatever path a client sends, the API server is sent the
// part below the cluster's prefix, starting with a slash, and escaped as the
// client escaped it (an escaped slash stays one).
func FuzzRewritePath(f *testing.F) {
	f.Add("/api/v1/namespaces/a/services/https:web:443/proxy/a%2Fb/c%20d", uint16(0))
	f.Add("", uint16(0))
	f.Add("%2Fx", uint16(0))
	f.Add("/%63", uint16(0))
	f.Add("/api/v1/namespaces/a/services/a%2Fb:80/proxy/", uint16(1<<9)) // /clusters/%63 (issue 33)
	h := fuzzHub(f, auth.Config{Users: testUsers})
	conn := &agentConn{hub: h, name: "c", saAuth: authorization("service-account-token")}
	const prefix = "/clusters/c"
	f.Fuzz(func(t *testing.T, path string, escape uint16) {
		// The client may escape any byte of the hub's part of the path, in
		// either case: bit i escapes byte i of "clusters/c" but the slash.
		var written strings.Builder
		written.WriteByte('/')
		for i, c := range []byte(prefix[1:]) {
			if c != '/' && escape&(1<<i) != 0 {
				hex := "0123456789ABCDEF"
				if escape&(1<<15) != 0 {
					hex = "0123456789abcdef"
				}
				written.Write([]byte{'%', hex[c>>4], hex[c&0xf]})
			} else {
				written.WriteByte(c)
			}
		}
		u, err := url.ParseRequestURI(written.String() + path)
		if err != nil {
			t.Skip()
		}
		in := httptest.NewRequest("GET", "/", nil)
		in.URL = u
		in = in.WithContext(context.WithValue(in.Context(), clusterKey{}, route{conn: conn, user: "alice", id: "id-1"}))
		pr := &httputil.ProxyRequest{In: in, Out: in.Clone(in.Context())}
		h.rewrite(pr)
		out := pr.Out.URL
		want := strings.TrimPrefix(u.Path, prefix)
		if !strings.HasPrefix(want, "/") {
			want = "/" + want
		}
		if out.Path != want {
			t.Fatalf("%q: the API server is sent path %q, want %q", u, out.Path, want)
		}
		sent := out.EscapedPath()
		if !strings.HasPrefix(sent, "/") {
			t.Fatalf("%q: the request line's path %q doesn't start with /", u, sent)
		}
		if un, err := url.PathUnescape(sent); err != nil || un != out.Path {
			t.Fatalf("%q: the request line's path %q doesn't decode to %q", u, sent, out.Path)
		}
		if escaped := u.EscapedPath(); strings.HasPrefix(escaped, written.String()+"/") && sent != strings.TrimPrefix(escaped, written.String()) {
			t.Fatalf("%q: the request line's path is %q, want %q as the client escaped it", u, sent, strings.TrimPrefix(escaped, written.String()))
		}
	})
}

// FuzzBasePath: any TETHER_BASE_PATH the settings take gives the hub routes
// it can serve (the router panics on an invalid or clashing pattern), and
// its pages are found under it.
func FuzzBasePath(f *testing.F) {
	for _, p := range []string{"/", "/tether", "/tether/", "/k8s/hub", "/api", "/api/v1", "/version", "/healthz", "/clusters", "/static", "/a b", "/{x}", "/x//y", "/.."} {
		f.Add(p)
	}
	h := fuzzHub(f, auth.Config{Users: testUsers})
	f.Fuzz(func(t *testing.T, p string) {
		_, err := OptionsFromEnv(func(k string) string {
			return map[string]string{"TETHER_BASE_PATH": p, "TETHER_USERS": testUsers}[k]
		}, false)
		if err != nil {
			return
		}
		h.cfg.BasePath = p
		handler := h.Handler() // panics on a pattern the router can't take
		base := strings.TrimSuffix(p, "/")
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, httptest.NewRequest("GET", base+"/api/clusters", nil))
		if rec.Code != http.StatusUnauthorized {
			t.Fatalf("base path %q: GET %s/api/clusters answered %d, want 401 (found, and asks who you are)", p, base, rec.Code)
		}
	})
}

// fuzzHub is a hub whose people are cfg's, with one cluster, c, and no
// agent: enough for what runs on a request alone. It starts nothing.
func fuzzHub(f *testing.F, cfg auth.Config) *Hub {
	people, err := auth.New(cfg)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { people.Close() })
	h, err := New(Config{Agents: testAgents("c"), Auth: people})
	if err != nil {
		f.Fatal(err)
	}
	return h
}

// FuzzAuditLine: whatever names, path and numbers a request brings, its
// audit line is what json.Marshal writes for the same record: valid JSON,
// one line, every string escaped as encoding/json escapes it.
func FuzzAuditLine(f *testing.F) {
	f.Add("alice@example.com", "admins", "token", "/api/v1/namespaces/a/pods", int64(1764633600123456789), 0.0123, int64(512))
	f.Add("\x00\"\\\b\f\n\r\t<>&\u2028\u2029", "\xff\xfe", "", "/a%2Fb?\x7f", int64(0), 5e-7, int64(-1))
	f.Add("ä€😀", "", "oidc", "", int64(math.MinInt64), 1e21, int64(1<<62))
	f.Fuzz(func(t *testing.T, person, group, source, path string, unixNano int64, seconds float64, n int64) {
		if math.IsInf(seconds, 0) || math.IsNaN(seconds) {
			return // a time.Duration's Seconds is always finite
		}
		groups := []string{} // none, as for a 401, or two
		if group != "" {
			groups = []string{group, person}
		}
		rec := kubeproxy.AuditRecord{
			Time: time.Unix(0, unixNano).UTC(), Person: person, Groups: groups, Source: source,
			Cluster: group, Verb: source, Method: person, Path: path, Status: int(n % 1000),
			Duration: seconds, Bytes: n, RequestID: path, Remote: group, Location: source,
		}
		want, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		if got := rec.appendJSON(nil); string(got) != string(want) {
			t.Fatalf("audit line\n%s\nwant what json.Marshal writes:\n%s", got, want)
		}

		// As the hub writes it (bound), the line stays under maxAuditLine
		// however long each text is, every cut field is marked, and it is
		// still json.Marshal's (issue 33).
		reps := 1 + int(uint64(n)%1024)
		long := rec
		long.Person, long.Cluster, long.Path = strings.Repeat(person, reps), strings.Repeat(group, reps), strings.Repeat(path, reps)
		long.Method, long.Verb, long.Remote = long.Person, strings.Repeat(source, reps), long.Cluster
		long.Groups = make([]string, reps)
		for i := range long.Groups {
			long.Groups[i] = strings.Repeat(group, 1+i%16)
		}
		for _, r := range []kubeproxy.AuditRecord{rec, long} {
			whole := r
			r.bound()
			line, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			if got := r.appendJSON(nil); string(got) != string(line) {
				t.Fatalf("bound audit line\n%s\nwant what json.Marshal writes:\n%s", got, line)
			}
			if len(line) > maxAuditLine {
				t.Fatalf("an audit line of %d bytes, more than %d", len(line), maxAuditLine)
			}
			for _, f := range []struct{ got, was string }{{r.Person, whole.Person}, {r.Cluster, whole.Cluster}, {r.Path, whole.Path}, {r.Method, whole.Method}} {
				if f.got != f.was && !strings.HasSuffix(f.got, fmt.Sprintf("…(%d bytes)", len(f.was))) {
					t.Fatalf("a field of %d bytes was cut to %q, without saying so", len(f.was), f.got[max(0, len(f.got)-40):])
				}
			}
			if len(r.Groups) < len(whole.Groups) && !strings.HasSuffix(r.Groups[len(r.Groups)-1], " more groups)") {
				t.Fatalf("%d groups were cut to %d, without saying so", len(whole.Groups), len(r.Groups))
			}
		}
	})
}

// FuzzReturnTo: whatever the sign-in form's next says, the browser is sent
// to the fleet page or a cluster's page under the hub's base path, and
// never to another site: no scheme, no host, no // or \ that a browser
// would take for one.
func FuzzReturnTo(f *testing.F) {
	for _, s := range []string{"/cluster/shop", "//evil.example/cluster/x", "/\\evil.example", "https://evil.example/", "/cluster/../x", "/cluster/%2F%2Fevil", ""} {
		f.Add("", s)
		f.Add("/tether", "/tether"+s)
	}
	f.Fuzz(func(t *testing.T, base, next string) {
		if !validBasePath(base) {
			return
		}
		h := &Hub{cfg: Config{BasePath: base}}
		pageBase := h.pageBase()
		got := h.returnTo(next)
		if got != pageBase && !strings.HasPrefix(got, pageBase+"cluster/") {
			t.Fatalf("next %q sends the browser to %q, outside %q", next, got, pageBase)
		}
		u, err := url.Parse(got)
		if err != nil || u.Scheme != "" || u.Host != "" || strings.HasPrefix(got, "//") || strings.ContainsAny(got, "\\\r\n") {
			t.Fatalf("next %q sends the browser to %q, which names a site", next, got)
		}
	})
}

// FuzzRedirect: whatever Location an API server (or what it proxies)
// answers with, clusterLocation either refuses it or points the client
// into the cluster's prefix on the hub, which every reader takes as on the
// hub: and it accepts only what Go's clients (client-go) would have
// followed to the API server the hub dialed.
func FuzzRedirect(f *testing.F) {
	for _, loc := range []string{
		"https://kubernetes.default.svc/api", "/api/v1/x%2Fy?q#f", "../../..", "d", "?", "#",
		"//evil.example/", "///evil.example", `/\evil.example`, "https://kubernetes.default.svc@evil.example/",
		"https://evil.example#@kubernetes.default.svc/", "/%2e%2e/clusters/other", "https:x", "javascript:x",
		"HTTPS://KUBERNETES.DEFAULT.SVC:443", "https://kubernetes.default.svc:/", "/a/%2E%2E/b", "%2F%2Fevil",
	} {
		f.Add(loc)
	}
	api, _ := url.Parse("https://kubernetes.default.svc/api/v1/namespaces/x/services/s:80/proxy/a%2Fb/c")
	hub, _ := url.Parse("https://hub.example.com/")
	const cluster = "https://hub.example.com/tether/clusters/eu"
	const prefix = "/tether/clusters/eu/"
	f.Fuzz(func(t *testing.T, loc string) {
		out, ok := clusterLocation(loc, api, cluster)
		if !ok {
			if out != "" {
				t.Fatalf("%q: refused, yet %q", loc, out)
			}
			return
		}
		// What Go would have followed: the API server the hub dialed.
		ref, err := url.Parse(loc)
		if err != nil {
			t.Fatalf("%q: Go can't parse it, yet it became %q", loc, out)
		}
		if to := api.ResolveReference(ref); to.Scheme != "https" || !strings.EqualFold(strings.TrimSuffix(to.Host, ":443"), "kubernetes.default.svc") {
			t.Fatalf("%q: Go resolves it to %s, off the API server, yet it became %q", loc, to, out)
		}
		if !strings.HasPrefix(out, cluster+"/") || strings.ContainsFunc(out, func(r rune) bool { return r <= ' ' || r >= 0x7f || r == '\\' }) {
			t.Fatalf("%q became %q", loc, out)
		}
		u, err := url.Parse(out)
		if err != nil {
			t.Fatalf("%q became %q, which doesn't parse: %v", loc, out, err)
		}
		to := hub.ResolveReference(u)
		path := to.EscapedPath()
		if to.Scheme != "https" || to.Host != "hub.example.com" || to.User != nil || !strings.HasPrefix(path, prefix) && path != strings.TrimSuffix(prefix, "/") {
			t.Fatalf("%q became %q, which leads to %s", loc, out, to)
		}
		for seg := range strings.SplitSeq(path, "/") {
			if d, err := url.PathUnescape(seg); err != nil || d == "." || d == ".." {
				t.Fatalf("%q became %q, with a dot segment %q", loc, out, seg)
			}
		}
	})
}
