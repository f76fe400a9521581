package hub

import (
	"log/slog"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/listfile"
	"github.com/tetherhq/tether/internal/logging"
	"github.com/tetherhq/tether/internal/testutil/syncbuf"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const testToken = "0123456789abcdef0123456789abcdef-agent-token"

// testAgents is an agents list with the clusters the tests use, all with
// testToken.
func testAgents(names ...string) *fleet.Agents {
	var list []fleet.Agent
	for _, n := range names {
		list = append(list, fleet.Agent{Name: n, TokenHashes: []listfile.Hash{listfile.HashToken(testToken)}, Groups: fleet.Groups{Everyone: true}})
	}
	return fleet.New(list)
}

func slogTo(b *syncbuf.Buffer) *slog.Logger { return slog.New(logging.NewTextHandler(b, nil)) }
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
