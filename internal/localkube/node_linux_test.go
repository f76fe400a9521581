package localkube

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

// testTTY runs `kubectl exec -it` on a terminal of 40 rows and 100
// columns, and checks that the command ran on a terminal of that size: so
// the kubelet made one and applied the size kubectl sent.
func testTTY(k *kube, env []string) {
	t := k.t
	ptm, pts, err := openTestPTY(40, 100)
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

// openTestPTY opens a pseudo-terminal of the given size.
func openTestPTY(rows, cols uint16) (ptm, pts *os.File, err error) {
	ptm, err = os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, err
	}
	rc, err := ptm.SyscallConn()
	if err != nil {
		ptm.Close()
		return nil, nil, err
	}
	var n uint32
	var errno syscall.Errno
	rc.Control(func(fd uintptr) {
		ioctl := func(req uintptr, arg unsafe.Pointer) {
			if errno == 0 {
				_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, req, uintptr(arg))
			}
		}
		var unlock int32
		ioctl(syscall.TIOCSPTLCK, unsafe.Pointer(&unlock))
		ioctl(syscall.TIOCGPTN, unsafe.Pointer(&n))
		size := [4]uint16{rows, cols, 0, 0} // struct winsize
		ioctl(syscall.TIOCSWINSZ, unsafe.Pointer(&size))
	})
	if errno != 0 {
		ptm.Close()
		return nil, nil, errno
	}
	pts, err = os.OpenFile("/dev/pts/"+strconv.FormatUint(uint64(n), 10), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		ptm.Close()
		return nil, nil, err
	}
	return ptm, pts, nil
}
