package hostport

import "testing"

func TestHost(t *testing.T) {
	for _, tc := range []struct {
		addr, host string
		ok         bool
	}{
		{"10.1.2.3:443", "10.1.2.3", true},
		{"[2001:db8::1]:443", "2001:db8::1", true},
		{"[fe80::1%eth0]:443", "fe80::1%eth0", true},
		{"[::ffff:10.1.2.3]:443", "::ffff:10.1.2.3", true},
		{"agent.example:443", "agent.example", true},
		{"10.1.2.3", "10.1.2.3", false},
		{"2001:db8::1", "2001:db8::1", false},
		{"[2001:db8::1]", "[2001:db8::1]", false},
		{"", "", false},
	} {
		host, ok := Host(tc.addr)
		if host != tc.host || ok != tc.ok {
			t.Errorf("Host(%q) = %q, %v; want %q, %v", tc.addr, host, ok, tc.host, tc.ok)
		}
	}
}
