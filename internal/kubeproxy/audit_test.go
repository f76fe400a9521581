package kubeproxy

import (
	"encoding/json"
	"fmt"
	"net/url"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestAppendJSONWritesEveryField: with every field of auditRecord set, the
// line the hub writes is json.Marshal's, so a field added to the record
// and left out of appendJSON fails here, whatever FuzzAuditLine sets.
func TestAppendJSONWritesEveryField(t *testing.T) {
	var rec AuditRecord
	v := reflect.ValueOf(&rec).Elem()
	for i := range v.NumField() {
		if !v.Type().Field(i).IsExported() {
			continue // not on the line, for json.Marshal either
		}
		f := v.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString(v.Type().Field(i).Name)
		case reflect.Int, reflect.Int64:
			f.SetInt(int64(i + 1))
		case reflect.Float64:
			f.SetFloat(float64(i) + 0.5)
		case reflect.Slice:
			f.Set(reflect.ValueOf([]string{"a", "b"}))
		case reflect.Pointer:
			p := reflect.New(f.Type().Elem())
			if p.Elem().Kind() != reflect.Bool {
				t.Fatalf("auditRecord.%s is a %s, which this test can't fill: teach it", v.Type().Field(i).Name, f.Type())
			}
			p.Elem().SetBool(i%2 == 0) // one true, one false
			f.Set(p)
		default:
			if f.Type() != reflect.TypeFor[time.Time]() {
				t.Fatalf("auditRecord.%s is a %s, which this test can't fill: teach it", v.Type().Field(i).Name, f.Type())
			}
			f.Set(reflect.ValueOf(time.Date(2026, 12, 2, 8, 0, 0, 123, time.UTC)))
		}
	}
	want, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if got := rec.appendJSON(nil); string(got) != string(want) {
		t.Errorf("audit line\n%s\nwant what json.Marshal writes:\n%s", got, want)
	}
}

// BenchmarkAuditLine compares the audit line as the hub writes it with
// json.Marshal of the same record, a small GET's.
func BenchmarkAuditLine(b *testing.B) {
	rec := AuditRecord{
		Time: time.Now().UTC(), Person: "bench@example.com", Groups: []string{"tether-bench", "developers"}, Source: "token",
		Cluster: "bench", Verb: "get", Method: "GET", Path: "/api/v1/namespaces/bench/configmaps/small",
		Status: 200, Duration: 0.00231, Bytes: 1873, RequestID: newRequestID(), Remote: "127.0.0.1:41234",
	}
	b.Run("appendJSON", func(b *testing.B) {
		b.ReportAllocs()
		var line []byte
		for b.Loop() {
			line = append(rec.appendJSON(line[:0]), '\n')
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			line, _ := json.Marshal(rec)
			_ = append(line, '\n')
		}
	})
}

// TestVerb: the audit line's verb is Kubernetes' name for what the request
// does.
func TestVerb(t *testing.T) {
	for _, tc := range []struct{ method, path, query, want string }{
		{"GET", "/api/v1/pods", "", "list"},
		{"GET", "/api/v1/namespaces/a/pods", "", "list"},
		{"GET", "/api/v1/namespaces/a/pods/p", "", "get"},
		{"GET", "/api/v1/namespaces/a/pods/p/log", "", "get"},
		{"GET", "/api/v1/namespaces/a/pods", "watch=true", "watch"},
		{"GET", "/apis/apps/v1/deployments", "watch=1", "watch"},
		{"GET", "/api/v1/pods", "watch=True&resourceVersion=5", "watch"},
		{"GET", "/api/v1/pods", "watch=false", "list"},
		{"GET", "/api/v1/watch/pods", "", "watch"},
		{"GET", "/api/v1/watch/namespaces/a/pods/p", "", "watch"},
		{"GET", "/apis/apps/v1/watch/namespaces/a/deployments", "", "watch"},
		{"GET", "/version", "", "get"},
		{"HEAD", "/api/v1/nodes", "", "list"},
		{"POST", "/api/v1/namespaces/a/pods", "", "create"},
		{"PUT", "/api/v1/namespaces/a/pods/p", "", "update"},
		{"PATCH", "/api/v1/namespaces/a/pods/p", "", "patch"},
		{"DELETE", "/api/v1/namespaces/a/pods/p", "", "delete"},
		{"DELETE", "/api/v1/namespaces/a/pods", "", "deletecollection"},
		{"OPTIONS", "/api", "", "options"},
	} {
		if got := verb(tc.method, tc.path, isWatch(tc.path, tc.query)); got != tc.want {
			t.Errorf("%s %s?%s: %q, want %q", tc.method, tc.path, tc.query, got, tc.want)
		}
	}
}

// TestStreamAudit: an exec's, attach's or port-forward's audit line says
// what it did (pod, container, command, tty, stdin, ports) as the API
// server reads its path and query, and no other request's line has those
// fields.
func TestStreamAudit(t *testing.T) {
	yes, no := true, false
	type fields struct {
		Pod, Container string
		Command        []string
		TTY, Stdin     *bool
		Ports          []string
	}
	for _, tc := range []struct {
		path, query string
		want        fields
	}{
		// What kubectl exec -it and kubectl exec send.
		{"/api/v1/namespaces/a/pods/web-0/exec", "command=sh&command=-c&command=echo+hi&container=app&stdin=true&stdout=true&tty=true",
			fields{"web-0", "app", []string{"sh", "-c", "echo hi"}, &yes, &yes, nil}},
		{"/api/v1/namespaces/a/pods/p/exec", "command=date&stdout=true&stderr=true",
			fields{"p", "", []string{"date"}, &no, &no, nil}},
		// Escaped values are recorded as the API server decodes them; a
		// secret in a command is recorded too.
		{"/api/v1/namespaces/a/pods/p/exec", "command=sh&command=-c&command=TOKEN%3Ds3cr%26t%20%22q%22%0Arun&container=%C3%A4%2Fb",
			fields{"p", "ä/b", []string{"sh", "-c", "TOKEN=s3cr&t \"q\"\nrun"}, &no, &no, nil}},
		// Bools as Kubernetes reads them: the first value, false only for
		// "0" or "false" in any case.
		{"/api/v1/namespaces/a/pods/p/exec", "command=x&tty=&stdin=1", fields{"p", "", []string{"x"}, &yes, &yes, nil}},
		{"/api/v1/namespaces/a/pods/p/exec", "command=x&tty=FALSE&stdin=0&stdin=true", fields{"p", "", []string{"x"}, &no, &no, nil}},
		{"/api/v1/namespaces/a/pods/p/exec", "command=x&tty=no", fields{"p", "", []string{"x"}, &yes, &no, nil}},
		// A pair Go's query parser refuses (as the API server's does) is
		// left out.
		{"/api/v1/namespaces/a/pods/p/exec", "command=a;b&command=%zz&command=ok", fields{"p", "", []string{"ok"}, &no, &no, nil}},
		// Attach has no command, whatever the query says.
		{"/api/v1/namespaces/a/pods/cat/attach", "container=main&stdin=true&stdout=true&tty=false&command=ignored",
			fields{"cat", "main", nil, &no, &yes, nil}},
		{"/api/v1/namespaces/a/pods/p/portforward", "ports=8080&ports=9090", fields{"p", "", nil, nil, nil, []string{"8080", "9090"}}},
		// kubectl names its ports inside the stream, not in the query.
		{"/api/v1/namespaces/a/pods/p/portforward", "", fields{Pod: "p"}},
		// Not a pod's exec, attach or port-forward.
		{"/api/v1/namespaces/a/pods/p", "command=x&container=c&tty=true", fields{}},
		{"/api/v1/namespaces/a/pods/p/log", "container=c&follow=true", fields{}},
		{"/api/v1/namespaces/a/pods", "watch=true", fields{}},
		{"/api/v1/namespaces/a/pods/p/proxy/exec", "command=x", fields{}},
		{"/api/v1/namespaces/a/services/s/exec", "command=x", fields{}},
		{"/api/v1/namespaces/a/pods//exec", "command=x", fields{}},
		{"/api/v1/namespaces//pods/p/exec", "command=x", fields{}},
		{"/api/v1/pods/p/exec", "command=x", fields{}},
		{"/apis/x.example/v1/namespaces/a/pods/p/exec", "command=x", fields{}},
		{"/exec", "command=x", fields{}},
		{"", "", fields{}},
	} {
		rec := AuditRecord{Path: tc.path}
		rec.setStream(tc.path, tc.query)
		got := fields{rec.Pod, rec.Container, rec.Command, rec.TTY, rec.Stdin, rec.Ports}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s?%s: %s, want %s", tc.path, tc.query, jsonOf(t, got), jsonOf(t, tc.want))
		}
		line := string(rec.appendJSON(nil))
		for _, key := range []string{`"pod"`, `"container"`, `"command"`, `"tty"`, `"stdin"`, `"ports"`} {
			if tc.want.Pod == "" && strings.Contains(line, key) {
				t.Errorf("%s?%s: the line has %s: %s", tc.path, tc.query, key, line)
			}
		}
	}
}

// TestStreamAuditBounded: however long a command or list of ports, the
// line keeps the start of each argument and of the list, and says how
// much was cut. A query of more than 10,000 pairs, which Go 1.26's
// url.ParseQuery refuses whole, is still read.
func TestStreamAuditBounded(t *testing.T) {
	huge := strings.Repeat("A", 1<<20)
	args := url.Values{"command": append([]string{"sh", "-c", huge}, slices.Repeat([]string{"x"}, 100000)...)}
	rec := AuditRecord{Path: "/api/v1/namespaces/a/pods/p/exec"}
	rec.setStream(rec.Path, args.Encode()+"&container="+huge)
	rec.bound()
	if len(rec.Command) < 4 || rec.Command[0] != "sh" || rec.Command[1] != "-c" {
		t.Fatalf("command cut to %d arguments, starting %.40q", len(rec.Command), rec.Command)
	}
	if want := strings.Repeat("A", maxAuditField) + "…(1048576 bytes)"; rec.Command[2] != want {
		t.Errorf("the long argument is %.40q…, %d bytes; want its first %d bytes and its length", rec.Command[2], len(rec.Command[2]), maxAuditField)
	}
	kept := len(rec.Command) - 1
	if want := fmt.Sprintf("…(%d more arguments)", len(args["command"])-kept); rec.Command[kept] != want {
		t.Errorf("the command ends %q, want %q", rec.Command[kept], want)
	}
	if !strings.HasSuffix(rec.Container, "…(1048576 bytes)") || len(rec.Container) > maxAuditField+len(cutMark) {
		t.Errorf("the container is cut to %d bytes, ending %q", len(rec.Container), rec.Container[len(rec.Container)-20:])
	}

	ports := url.Values{"ports": slices.Repeat([]string{"65535"}, 100000)}
	pf := AuditRecord{Path: "/api/v1/namespaces/a/pods/p/portforward"}
	pf.setStream(pf.Path, ports.Encode())
	pf.bound()
	if n := len(pf.Ports) - 1; n < 100 || pf.Ports[0] != "65535" || pf.Ports[n] != fmt.Sprintf("…(%d more ports)", 100000-n) {
		t.Errorf("%d ports cut to %d, ending %q", 100000, n, pf.Ports[n])
	}
	for _, r := range []AuditRecord{rec, pf} {
		if line := r.appendJSON(nil); len(line) > maxAuditLine {
			t.Errorf("an audit line of %d bytes, more than %d", len(line), maxAuditLine)
		}
	}
}

// TestStreamAuditHoldsWhatTheLineKeeps: a query of a megabyte of empty
// arguments (116,508 of them), which anyone may send, signed in or not,
// costs the hub what the line keeps of it, not a slice of every argument.
func TestStreamAuditHoldsWhatTheLineKeeps(t *testing.T) {
	query := strings.Repeat("command=&", (1<<20)/9)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	rec := AuditRecord{}
	rec.setStream("/api/v1/namespaces/a/pods/p/exec", query)
	rec.bound()
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
		t.Errorf("%d bytes allocated for a line of %d arguments", n, len(rec.Command))
	}
	if want := fmt.Sprintf("…(%d more arguments)", (1<<20)/9-(len(rec.Command)-1)); rec.Command[len(rec.Command)-1] != want {
		t.Errorf("the command ends %q, want %q", rec.Command[len(rec.Command)-1], want)
	}
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
