package fleet

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/tetherhq/tether/internal/listfile"
)

func TestParseClusters(t *testing.T) {
	const ok = "- name: staging\n  server: https://10.0.0.5:6443\n  caFile: /ca.crt\n  tokenFile: /token\n"
	got, err := ParseClusters([]byte(ok + "- name: prod\n  server: https://api.example.com\n  caFile: /p/ca\n  tokenFile: /p/token\n  labels: {env: prod}\n  groups: [platform]\n  forwardToken: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []Cluster{
		{Name: "staging", Server: "10.0.0.5:6443", ServerName: "10.0.0.5", CAFile: "/ca.crt", TokenFile: "/token", Groups: Groups{Everyone: true}},
		{Name: "prod", Server: "api.example.com:443", ServerName: "api.example.com", CAFile: "/p/ca", TokenFile: "/p/token",
			Labels: map[string]string{"env": "prod"}, Groups: Groups{Names: []string{"platform"}}, ForwardToken: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	if got, err := ParseClusters([]byte("- name: v6\n  server: https://[fd00::1]:6443/\n  caFile: c\n  tokenFile: t\n")); err != nil || got[0].Server != "[fd00::1]:6443" || got[0].ServerName != "fd00::1" {
		t.Errorf("IPv6 server: %+v, %v", got, err)
	}

	for _, tc := range []struct{ list, want string }{
		{"- name: a\n  caFile: c\n  tokenFile: t\n", `TETHER_FLEET_CLUSTERS[0] ("a") needs a server like https://10.0.0.5:6443: it has none.`},
		{"- name: a\n  server: http://h:1\n  caFile: c\n  tokenFile: t\n", `is not an https:// URL`},
		{"- name: a\n  server: https://h:1/api\n  caFile: c\n  tokenFile: t\n", `has more than a scheme, host and port`},
		{"- name: a\n  server: https://u:p@h:1\n  caFile: c\n  tokenFile: t\n", `has more than a scheme, host and port`},
		{"- name: a\n  server: https://h:70000\n  caFile: c\n  tokenFile: t\n", `has a bad port`},
		{"- name: a\n  server: https://h:https\n  caFile: c\n  tokenFile: t\n", `is not a URL`},
		{"- name: a\n  server: \"https://h:\"\n  caFile: c\n  tokenFile: t\n", `has an empty port`},
		{"- name: a\n  server: https:///x\n  caFile: c\n  tokenFile: t\n", `has no host`},
		{"- name: a\n  server: https://]\n  caFile: c\n  tokenFile: t\n", `"https://]" has a host that is neither a DNS name nor an IP address.`},
		{"- name: a\n  server: https://a*b\n  caFile: c\n  tokenFile: t\n", `has a host that is neither a DNS name nor an IP address`},
		{"- name: a\n  server: https://h\n  tokenFile: t\n", `("a") needs caFile, the path of a file.`},
		{"- name: a\n  server: https://h\n  caFile: c\n", `("a") needs tokenFile, the path of a file.`},
		{"- name: a\n  server: https://h\n  caFile: c\n  tokenFile: t\n  token: x\n", `unknown field`},
		{"- name: A\n  server: https://h\n  caFile: c\n  tokenFile: t\n", `needs a name that is a DNS label`},
		{"- name: a\n  server: https://h\n  caFile: c\n  tokenFile: t\n  groups:\n", `has no value for groups`},
		{ok + ok, `has the same name as TETHER_FLEET_CLUSTERS[0]`},
	} {
		_, err := ParseClusters([]byte(tc.list))
		var le *listfile.ListError
		if !errors.As(err, &le) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want a list error with %q", tc.list, err, tc.want)
		}
	}
}

func TestLoadWithExtra(t *testing.T) {
	extra := []Agent{{Name: "staging", TokenHashes: []listfile.Hash{listfile.HashToken(token1)}, Groups: Groups{Everyone: true}}}
	a, err := Load(Config{Extra: extra})
	if err != nil || a == nil || a.Len() != 1 {
		t.Fatalf("clusters only: %v, %v", a, err)
	}
	if _, ok := a.Authenticate("staging", token1); !ok {
		t.Error("the extra entry's agent isn't accepted")
	}
	a, err = Load(Config{Agents: entry("eu", hash1), Extra: extra})
	if err != nil || a.Len() != 2 {
		t.Fatalf("both: %v, %v", a, err)
	}
	_, err = Load(Config{Agents: entry("eu", hash1) + entry("staging", hash2), Extra: extra})
	if err == nil || err.Error() != `TETHER_FLEET_AGENTS[1] ("staging") has the name of a cluster in TETHER_FLEET_CLUSTERS; names must be unique.` {
		t.Errorf("a name in both lists: %v", err)
	}
}
