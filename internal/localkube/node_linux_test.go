package localkube

import (
	"bytes"
	"strings"
	"time"

	"github.com/tetherhq/tether/internal/testutil/ptytest"
)

// testTTY runs `kubectl exec -it` on a terminal of 40 rows and 100
// columns, and checks that the command ran on a terminal of that size: so
// the kubelet made one and applied the size kubectl sent.
func testTTY(k *kube, env []string) {
	t := k.t
	ptm, pts, err := ptytest.Open(40, 100)
	if err != nil {
		t.Fatal(err)
	}
	defer ptm.Close()
	cmd := k.kubectl(env, "exec", "-it", "-n", ns, "clock", "--", "sh", "-c", "stty size; test -t 0 && echo on-a-terminal")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = pts, pts, pts
	err = cmd.Start()
	pts.Close()
	if err != nil {
		t.Fatal(err)
	}
	// Reads end with EIO once kubectl, the terminal's last user, exits.
	ptm.SetReadDeadline(time.Now().Add(time.Minute))
	var out bytes.Buffer
	out.ReadFrom(ptm)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("kubectl exec -it: %v: %q", err, out.String())
	}
	if got := out.String(); !strings.Contains(got, "40 100") || !strings.Contains(got, "on-a-terminal") {
		t.Errorf("kubectl exec -it printed %q, want the size 40 100 and on-a-terminal", got)
	}
}
