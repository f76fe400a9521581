//go:build unix && !linux

package localkube

// testTTY needs a pseudo-terminal for kubectl, which only the Linux
// tests open.
func testTTY(k *kube, _ []string) { k.t.Skip("opens a pseudo-terminal the Linux way") }
