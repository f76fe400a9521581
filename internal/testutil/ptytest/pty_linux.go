// Package ptytest opens pseudo-terminals for tests that run a command
// with a terminal.
package ptytest

import (
	"os"
	"strconv"
	"syscall"
	"unsafe"
)

// Open opens a pseudo-terminal of the given size, for a command run
// with a terminal (kubectl exec -t): ptm is the controller the test reads
// and writes, pts the terminal the command gets.
func Open(rows, cols uint16) (ptm, pts *os.File, err error) {
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
