package auth

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
)

func TestProxyHeaders(t *testing.T) {
	a := newAuth(t, Config{
		ProxyUserHeader:   "x-remote-user",
		ProxyGroupsHeader: "X-Remote-Group",
		ProxyTrusted: []netip.Prefix{
			netip.MustParsePrefix("10.0.0.0/8"),
			netip.MustParsePrefix("fd00:1::/64"),
			netip.MustParsePrefix("192.0.2.7/32"),
		},
		Users: "- name: bob\n  token: " + tokBob + "\n",
	})
	if got := a.ProxyHeaders(); !slices.Equal(got, []string{"X-Remote-User", "X-Remote-Group"}) {
		t.Errorf("ProxyHeaders = %v", got)
	}
	for _, tc := range []struct {
		name    string
		peer    string
		headers []string
		ok      bool
		person  Person
		err     error
	}{
		{"trusted v4", "10.1.2.3:5000", []string{"X-Remote-User: alice", "X-Remote-Group: dev, platform"},
			true, Person{Name: "alice", Groups: []string{"dev", "platform"}}, nil},
		{"repeated groups", "10.1.2.3:5000", []string{"X-Remote-User: alice", "X-Remote-Group: dev", "X-Remote-Group: ops,, qa "},
			true, Person{Name: "alice", Groups: []string{"dev", "ops", "qa"}}, nil},
		{"no groups", "192.0.2.7:1", []string{"X-Remote-User: alice"}, true, Person{Name: "alice"}, nil},
		{"header case", "10.1.2.3:5000", []string{"x-REMOTE-user: alice"}, true, Person{Name: "alice"}, nil},
		{"trusted v6", "[fd00:1::42]:443", []string{"X-Remote-User: alice"}, true, Person{Name: "alice"}, nil},
		{"v6 with zone", "[fd00:1::42%eth0]:443", []string{"X-Remote-User: alice"}, true, Person{Name: "alice"}, nil},
		{"v4 mapped in v6", "[::ffff:10.9.9.9]:443", []string{"X-Remote-User: alice"}, true, Person{Name: "alice"}, nil},
		{"untrusted v4", "192.0.2.8:5000", []string{"X-Remote-User: alice", "X-Remote-Group: admins"}, false, Person{}, nil},
		{"untrusted v6", "[fd00:2::1]:443", []string{"X-Remote-User: alice"}, false, Person{}, nil},
		{"spoofed X-Forwarded-For", "203.0.113.9:5000", []string{"X-Forwarded-For: 10.1.2.3", "X-Real-Ip: 10.1.2.3", "Forwarded: for=10.1.2.3", "X-Remote-User: alice"}, false, Person{}, nil},
		{"no peer port", "10.1.2.3", []string{"X-Remote-User: alice"}, false, Person{}, nil},
		{"not an address", "pipe", []string{"X-Remote-User: alice"}, false, Person{}, nil},
		{"no header", "10.1.2.3:5000", nil, false, Person{}, nil},
		{"empty user", "10.1.2.3:5000", []string{"X-Remote-User: ", "X-Remote-Group: admins"}, false, Person{}, nil},
		{"two users", "10.1.2.3:5000", []string{"X-Remote-User: alice", "X-Remote-User: mallory"}, false, Person{}, ErrMalformed},
		{"basic auth from the proxy", "10.1.2.3:5000", []string{"Authorization: Basic YWxpY2U6", "X-Remote-User: alice"}, true, Person{Name: "alice"}, nil},
		{"basic auth from elsewhere", "192.0.2.8:5000", []string{"Authorization: Basic YWxpY2U6", "X-Remote-User: alice"}, false, Person{}, ErrMalformed},
		// Issue 33: names that read as others in a log line.
		{"zero-width user", "10.1.2.3:5000", []string{"X-Remote-User: \u200bsystem:admin"}, false, Person{}, ErrIdentity},
		{"bidi group", "10.1.2.3:5000", []string{"X-Remote-User: alice", "X-Remote-Group: dev, ops\u202e"}, false, Person{}, ErrIdentity},
		{"fullwidth colon group", "10.1.2.3:5000", []string{"X-Remote-User: alice", "X-Remote-Group: system\uff1amasters"}, false, Person{}, ErrIdentity},
		{"line separator in the user", "10.1.2.3:5000", []string{"X-Remote-User: al\u2028ice"}, false, Person{}, ErrIdentity},
		{"a bearer token wins", "10.1.2.3:5000", []string{"Authorization: Bearer " + tokBob, "X-Remote-User: alice"}, true, Person{Name: "bob", Source: SourceToken}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, ok, err := a.Authenticate(request(tc.peer, tc.headers...))
			if ok != tc.ok || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Fatalf("got %+v %v %v, want ok=%v err=%v", p, ok, err, tc.ok, tc.err)
			}
			want := tc.person
			if want.Name != "" && want.Source == "" {
				want.Source = SourceProxy
			}
			if p.Name != want.Name || !slices.Equal(p.Groups, want.Groups) || p.Source != want.Source || p.Bearer != "" {
				t.Errorf("got %+v, want %+v", p, want)
			}
		})
	}
	// Error texts.
	_, _, err := a.Authenticate(request("10.1.2.3:5000", "X-Remote-User: a", "X-Remote-User: b"))
	if want := "malformed credentials: the auth proxy sent 2 X-Remote-User headers; it must send one"; err == nil || err.Error() != want {
		t.Errorf("error:\n got %v\nwant %s", err, want)
	}
	_, _, err = a.Authenticate(request("192.0.2.8:5000", "Authorization: Basic YWxpY2U6"))
	if want := `malformed credentials: the Authorization header must be "Bearer <token>"; it has the scheme "Basic"`; err == nil || err.Error() != want {
		t.Errorf("error:\n got %v\nwant %s", err, want)
	}
}

func TestNoProxy(t *testing.T) {
	a := newAuth(t, Config{})
	if h := a.ProxyHeaders(); h != nil {
		t.Errorf("ProxyHeaders = %v", h)
	}
	if p, ok, err := a.Authenticate(request("10.1.2.3:5000", "X-Remote-User: alice")); ok || err != nil {
		t.Errorf("%+v %v %v", p, ok, err)
	}
	b := newAuth(t, Config{ProxyUserHeader: "X-User", ProxyTrusted: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	if h := b.ProxyHeaders(); !slices.Equal(h, []string{"X-User"}) {
		t.Errorf("ProxyHeaders = %v", h)
	}
}
