package fleet

import (
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/tetherhq/tether/internal/listfile"
)

func TestAuthenticate(t *testing.T) {
	list, err := ParseAgents(SettingAgents, []byte(`
- {name: one, tokenSha256: `+hash1+`}
- {name: upper, tokenSha256: `+strings.ToUpper(hash2)+`}
- {name: rotating, tokenSha256: [`+hash1+`, `+hash2+`]}
- {name: plain, token: `+token2+`}
`))
	if err != nil {
		t.Fatal(err)
	}
	agents := New(list)
	for _, tc := range []struct {
		name, token string
		ok          bool
	}{
		{"one", token1, true},
		{"one", token2, false},
		{"one", "", false},
		{"one", token1 + "\n", false}, // the hash is of the text exactly as written
		{"unknown", token1, false},
		{"", token1, false},
		{"upper", token2, true},
		{"rotating", token1, true},
		{"rotating", token2, true},
		{"rotating", "x", false},
		{"plain", token2, true},
		{"plain", token1, false},
	} {
		a, ok := agents.Authenticate(tc.name, tc.token)
		if ok != tc.ok || ok && a.Name != tc.name || !ok && a.Name != "" {
			t.Errorf("Authenticate(%q, …) = %q, %v; want ok=%v", tc.name, a.Name, ok, tc.ok)
		}
	}

	var none *Agents // a hub without an agents list
	if _, ok := none.Authenticate("one", token1); ok {
		t.Error("a nil *Agents authenticated an agent")
	}
	if _, ok := none.Lookup("one"); ok || len(none.List()) != 0 {
		t.Error("a nil *Agents knows an agent")
	}
}

func TestAgentCAMatches(t *testing.T) {
	pem := []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
	if !(Agent{}).CAMatches(pem) {
		t.Error("an entry without caSha256 refused a CA")
	}
	a := Agent{CASHA256: listfile.TokenSHA256(string(pem))}
	if !a.CAMatches(pem) || a.CAMatches(append(pem, '\n')) {
		t.Error("caSha256 doesn't pin the CA")
	}
}

func TestReplaceChange(t *testing.T) {
	agents := New(mustParse(t, `
- {name: stays, tokenSha256: `+hash1+`}
- {name: goes, tokenSha256: `+hash1+`}
- {name: starts-rotation, tokenSha256: `+hash1+`}
- {name: ends-rotation, tokenSha256: [`+hash1+`, `+hash2+`]}
- {name: relabelled, tokenSha256: `+hash1+`, labels: {a: b}}
`))
	c := agents.Replace(mustParse(t, `
- {name: stays, tokenSha256: `+hash1+`}
- {name: starts-rotation, tokenSha256: [`+hash1+`, `+hash2+`]}
- {name: ends-rotation, tokenSha256: `+hash2+`}
- {name: relabelled, tokenSha256: `+hash1+`, labels: {a: c}}
- {name: new, tokenSha256: `+hash2+`}
`))
	want := Change{
		Added:         []string{"new"},
		Removed:       []string{"goes"},
		Updated:       []string{"ends-rotation", "relabelled", "starts-rotation"},
		TokensRevoked: []string{"ends-rotation"},
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("Change = %+v\nwant %+v", c, want)
	}
	if _, ok := agents.Authenticate("goes", token1); ok {
		t.Error("a removed agent still authenticates")
	}
	if _, ok := agents.Authenticate("ends-rotation", token1); ok {
		t.Error("a revoked token still authenticates")
	}
	if c := agents.Replace(agents.List()); !c.Empty() {
		t.Errorf("the same list again changed %+v", c)
	}
}

// TestConcurrentUse is for -race: readers never see a list half replaced.
func TestConcurrentUse(t *testing.T) {
	a1 := mustParse(t, "- {name: a, tokenSha256: "+hash1+"}")
	a2 := mustParse(t, "- {name: a, tokenSha256: "+hash2+"}\n- {name: b, tokenSha256: "+hash2+"}")
	agents := New(a1)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for j := range 500 {
				if i == 0 {
					agents.Replace([][]Agent{a1, a2}[j%2])
					continue
				}
				agents.Authenticate("a", token1)
				agents.Lookup("b")
				agents.List()
			}
		})
	}
	wg.Wait()
}

func mustParse(t *testing.T, yaml string) []Agent {
	t.Helper()
	list, err := ParseAgents(SettingAgents, []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return list
}
