package server

import (
	"context"
	"encoding/base64"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/testutil/syncbuf"
)

// TestBadAgentsListStopsTheHub: SPEC section 2, "a bad list stops the hub at
// start with a line naming the entry", through Serve as `tether hub` runs
// it, whichever way the list is given.
func TestBadAgentsListStopsTheHub(t *testing.T) {
	const noToken = "- name: private-eu\n"
	const spec = `TETHER_FLEET_AGENTS[0] ("private-eu") needs a token of at least 32 characters, or its tokenSha256.`
	good := "- {name: good, token: " + strings.Repeat("g", 32) + "}\n"
	file := filepath.Join(t.TempDir(), "agents.yaml")
	if err := os.WriteFile(file, []byte(good+noToken), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		settings map[string]string
		want     string
	}{
		{"YAML", map[string]string{"TETHER_FLEET_AGENTS": noToken}, spec},
		{"base64", map[string]string{"TETHER_FLEET_AGENTS": base64.StdEncoding.EncodeToString([]byte(noToken))}, spec},
		{"a file, second entry", map[string]string{"TETHER_FLEET_AGENTS_FILE": file},
			`TETHER_FLEET_AGENTS_FILE[1] ("private-eu") needs a token of at least 32 characters, or its tokenSha256.`},
		{"duplicate names", map[string]string{"TETHER_FLEET_AGENTS": good + good},
			`TETHER_FLEET_AGENTS[1] ("good") has the same name as TETHER_FLEET_AGENTS[0]; names must be unique.`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.settings["TETHER_PUBLIC_URL"] = "http://hub.example.com"
			tt.settings["TETHER_METRICS_ADDR"] = "0"
			tt.settings["TETHER_USERS"] = "- {name: ann, token: " + strings.Repeat("a", 32) + "}\n"
			opts := optionsOn(t, tt.settings)
			logs := &syncbuf.Buffer{}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := Serve(ctx, opts, slog.New(slog.NewTextHandler(logs, nil)), nil)
			if err == nil {
				t.Fatalf("Serve returned nil with a bad agents list; its log:\n%s", logs)
			}
			if err.Error() != tt.want {
				t.Errorf("Serve: %v\nwant it to say: %s", err, tt.want)
			}
			if ctx.Err() != nil {
				t.Errorf("Serve ran until its context ended instead of stopping at start")
			}
		})
	}
}

// TestUnpinnedForwardTokenIsWarnedOf: a cluster that gets people's own
// tokens and whose CA isn't pinned is one whose agent's token holder could
// read those tokens: the hub says so at start, naming it; a pinned one is
// not warned of.
func TestUnpinnedForwardTokenIsWarnedOf(t *testing.T) {
	ca := strings.Repeat("ab", 32)
	opts := optionsOn(t, map[string]string{
		"TETHER_PUBLIC_URL":   "http://hub.example.com",
		"TETHER_METRICS_ADDR": "0",
		"TETHER_USERS":        "- {name: ann, token: " + strings.Repeat("a", 32) + "}\n",
		"TETHER_FLEET_AGENTS": "- {name: open, token: " + testToken + ", forwardToken: true}\n" +
			"- {name: pinned, token: " + testToken + "-2, forwardToken: true, caSha256: " + ca + "}\n" +
			"- {name: plain, token: " + testToken + "-3}\n",
	})
	logs := serve(t, opts)
	eventually(t, 5*time.Second, "the hub listening", func() bool { return strings.Contains(logs.String(), "hub listening") })
	if !strings.Contains(logs.String(), `A cluster gets people's own tokens (forwardToken) but doesn't pin its CA (caSha256): whoever holds its agent's token could read them. Pin it with caSha256: the SHA-256 of the cluster's ca.crt cluster="open"`) {
		t.Errorf("no warning for open:\n%s", logs)
	}
	for _, name := range []string{"pinned", "plain"} {
		if strings.Contains(logs.String(), fmt.Sprintf("Cluster %q gets people's own tokens", name)) {
			t.Errorf("a warning for %s:\n%s", name, logs)
		}
	}
}
