package kubeproxy

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/auth"
)

// FuzzRewrite: whatever headers a person sends, the request the API server
// gets carries exactly the hub's credentials and impersonation, and none of
// the person's.
func FuzzRewrite(f *testing.F) {
	f.Add("Authorization", "Bearer stolen", "Impersonate-User", "system:admin", "alice", "dev")
	f.Add("authorization", "x", "impersonate-group", "system:masters", "bob", "ops")
	f.Add("Cookie", "s=1", "IMPERSONATE-EXTRA-SCOPES", "x", "carol", "")
	f.Add("X-Remote-User", "admin", "x-remote-group", "system:masters", "dave", "a")
	f.Add("Tether-Request-Id", "forged", "Impersonate-Uid", "0", "erin", "b")
	h := fuzzProxy(f, auth.Config{Users: testUsers, ProxyUserHeader: "X-Remote-User", ProxyGroupsHeader: "X-Remote-Group",
		ProxyTrusted: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	conn := fakeConn()
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
			case lk == strings.ToLower(RequestIDHeader):
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

// FuzzRewritePath: whatever path a client sends, the API server is sent the
// part below the cluster's prefix, starting with a slash, and escaped as the
// client escaped it (an escaped slash stays one).
func FuzzRewritePath(f *testing.F) {
	f.Add("/api/v1/namespaces/a/services/https:web:443/proxy/a%2Fb/c%20d", uint16(0))
	f.Add("", uint16(0))
	f.Add("%2Fx", uint16(0))
	f.Add("/%63", uint16(0))
	f.Add("/api/v1/namespaces/a/services/a%2Fb:80/proxy/", uint16(1<<9)) // /clusters/%63 (issue 33)
	h := fuzzProxy(f, auth.Config{Users: testUsers})
	conn := fakeConn()
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
		rec := AuditRecord{
			Time: time.Unix(0, unixNano).UTC(), Person: person, Groups: groups, Source: source,
			Cluster: group, Verb: source, Method: person, Path: path, Status: int(n % 1000),
			Duration: seconds, Bytes: n, RequestID: path, Remote: group, Location: source,
			Recording: path, RecordingStopped: source,
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
		long.Recording, long.RecordingStopped = long.Path, long.Verb
		long.Groups = make([]string, reps)
		for i := range long.Groups {
			long.Groups[i] = strings.Repeat(group, 1+i%16)
		}
		for _, r := range []AuditRecord{rec, long} {
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

// FuzzStreamAudit: whatever query an exec, attach or port-forward brings,
// queryPairs reads it as url.ParseQuery does (the API server's reading),
// an exec's command, container and tty are what the client sent, and the
// bound line still says what it cut, stays under maxAuditLine and is
// json.Marshal's.
func FuzzStreamAudit(f *testing.F) {
	f.Add("command=sh&command=-c&command=echo+hi&container=c&stdin=true&tty=true", "ls", uint16(1))
	f.Add("a;b=c&%zz=1&=x&&x=%&ports=80&ports=%38%30", "TOKEN=\x00\"\\<>&\u2028\xff", uint16(5000))
	f.Add("tty=FALSE&stdin=0&stdin=1", "", uint16(0))
	f.Add("command=%E2%82%AC&command=+", strings.Repeat("€", 400), uint16(70))
	f.Fuzz(func(t *testing.T, raw, arg string, n uint16) {
		// Read as url.ParseQuery reads it, where it reads it at all.
		if strings.Count(raw, "&") < 10000 {
			want, _ := url.ParseQuery(raw)
			got := url.Values{}
			for k, v := range queryPairs(raw) {
				got[k] = append(got[k], v)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%q read as %q, want %q", raw, got, want)
			}
		}
		for _, sub := range []string{"exec", "attach", "portforward"} {
			rec := AuditRecord{Path: "/api/v1/namespaces/a/pods/p/" + sub}
			rec.setStream(rec.Path, raw)
			checkBound(t, rec)
		}

		// An exec of up to 3,000 arguments, each arg: enough to cut.
		n %= 3000
		sent := url.Values{"command": slices.Repeat([]string{arg}, int(n)), "container": {arg}, "tty": {arg}}
		rec := AuditRecord{Path: "/api/v1/namespaces/a/pods/p/exec"}
		rec.setStream(rec.Path, sent.Encode())
		// It keeps the first of them and counts the rest.
		if !slices.Equal(rec.Command, sent["command"][:len(rec.Command)]) || len(rec.Command)+rec.commandMore != int(n) ||
			rec.Container != arg || *rec.TTY != (arg != "0" && !strings.EqualFold(arg, "false")) || *rec.Stdin {
			t.Fatalf("%d × %q read as %d arguments and %d more, container %q, tty %v, stdin %v",
				n, arg, len(rec.Command), rec.commandMore, rec.Container, *rec.TTY, *rec.Stdin)
		}
		// Bound, each argument is arg, or its start and its length; as many
		// as fit in maxAuditCommand, and then how many more there were.
		rec = checkBound(t, rec)
		each := arg
		if len(arg) > maxAuditField {
			each = fmt.Sprintf("%s…(%d bytes)", strings.ToValidUTF8(arg[:maxAuditField], ""), len(arg))
		}
		want := slices.Repeat([]string{each}, min(int(n), (maxAuditCommand-len(each))/(len(each)+1)+1))
		if len(want) < int(n) {
			want = append(want, fmt.Sprintf("…(%d more arguments)", int(n)-len(want)))
		}
		if !slices.Equal(rec.Command, want) {
			t.Fatalf("%d × %q bound to %d arguments, want %d", n, arg, len(rec.Command), len(want))
		}
	})
}

// checkBound bounds rec as the hub does, and fails unless its line is
// json.Marshal's and under maxAuditLine.
func checkBound(t *testing.T, rec AuditRecord) AuditRecord {
	t.Helper()
	if rec.Groups == nil {
		rec.Groups = []string{} // as the hub writes it, and appendJSON does
	}
	rec.bound()
	want, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if got := rec.appendJSON(nil); string(got) != string(want) {
		t.Fatalf("audit line\n%s\nwant what json.Marshal writes:\n%s", got, want)
	}
	if len(want) > maxAuditLine {
		t.Fatalf("an audit line of %d bytes, more than %d", len(want), maxAuditLine)
	}
	return rec
}
