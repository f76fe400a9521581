package agent

import (
	"testing"

	"go.uber.org/goleak"
)

// The agent's goroutines are exercised end to end in internal/hub's tests,
// which run it against a real hub; the leak check belongs here too.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
