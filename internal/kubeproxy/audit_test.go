package kubeproxy

import (
	"encoding/json"
	"reflect"
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
