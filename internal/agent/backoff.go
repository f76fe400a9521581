package agent

import "time"

// backoffSteps are the waits before each reconnect after a failure (SPEC
// section 1): after the last, every wait is the last.
var backoffSteps = []time.Duration{1 * time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 15 * time.Second, 30 * time.Second}

// jitter is how far a wait may be stretched or shrunk, as a fraction.
const jitter = 0.2

// backoff returns the wait before reconnect number attempt (0 is the first
// after a failure), given a random number in [0, 1). Spreading each wait keeps
// thousands of agents that lost the same hub from coming back in step.
func backoff(attempt int, random float64) time.Duration {
	d := backoffSteps[min(attempt, len(backoffSteps)-1)]
	f := 1 + jitter*(2*random-1)
	return time.Duration(float64(d) * f)
}
