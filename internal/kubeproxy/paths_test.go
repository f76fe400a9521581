package kubeproxy

import (
	"testing"
)

func TestTrimEscapedPrefix(t *testing.T) {
	for _, c := range []struct {
		escaped, prefix, rest string
		ok                    bool
	}{
		{"/clusters/a-b/api/x%2Fy", "/clusters/a-b", "/api/x%2Fy", true},
		{"/clusters/a%2Db/api/x%2Fy", "/clusters/a-b", "/api/x%2Fy", true},
		{"/clusters/a%2db", "/clusters/a-b", "", true},
		{"/t%65ther/clusters/a/", "/tether/clusters/a", "/", true},
		{"/clusters/a-b%2Fapi/x", "/clusters/a-b", "", false},
		{"/clusters/a-bc/api", "/clusters/a-b", "", false},
		{"/clusters/a%zzb/api", "/clusters/a-b", "", false},
		{"/clusters", "/clusters/a-b", "", false},
		{"", "/clusters/a-b", "", false},
		{"//clusters/a-b/api", "/clusters/a-b", "", false},
	} {
		rest, ok := trimEscapedPrefix(c.escaped, c.prefix)
		if rest != c.rest || ok != c.ok {
			t.Errorf("trimEscapedPrefix(%q, %q) = %q, %v; want %q, %v", c.escaped, c.prefix, rest, ok, c.rest, c.ok)
		}
	}
}
