package main

import (
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// sysProcAttr makes a container's or an exec's process lead a process
// group of its own (a session, with a terminal as its controlling one), so
// that signals reach all it starts, and has the kernel kill it when the
// kubelet dies.
//
// Pdeathsig fires when the thread that started the child exits, not the
// process (golang.org/issue/27505); the Go runtime keeps its threads unless
// a goroutine exits while locked to one, which this program never does.
func sysProcAttr(tty bool) *syscall.SysProcAttr {
	if tty {
		return &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0, Pdeathsig: syscall.SIGKILL}
	}
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// openPTY opens a new pseudo-terminal: the controller, kept by the
// kubelet, and the terminal, for the process.
func openPTY() (ptm, pts *os.File, err error) {
	ptm, err = os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, err
	}
	var n uint32
	// Control rather than Fd: Fd would make ptm blocking, and Close could
	// then no longer interrupt a Read.
	cerr := withFd(ptm, func(fd int) error {
		if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
			return err
		}
		n, err = unix.IoctlGetUint32(fd, unix.TIOCGPTN)
		return err
	})
	if cerr != nil {
		ptm.Close()
		return nil, nil, cerr
	}
	pts, err = os.OpenFile("/dev/pts/"+strconv.Itoa(int(n)), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		ptm.Close()
		return nil, nil, err
	}
	return ptm, pts, nil
}

// setPTYSize sets the terminal's size, which sends its process SIGWINCH.
func setPTYSize(ptm *os.File, rows, cols uint16) error {
	return withFd(ptm, func(fd int) error {
		return unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	})
}

func withFd(f *os.File, op func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var opErr error
	if err := rc.Control(func(fd uintptr) { opErr = op(int(fd)) }); err != nil {
		return err
	}
	return opErr
}
