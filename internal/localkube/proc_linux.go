package localkube

import "syscall"

// sysProcAttr puts a child in its own process group, so that stop reaches
// anything it starts, and has the kernel kill it when this process dies, so
// that a test binary killed by its timeout leaves no API server behind.
//
// Pdeathsig fires when the thread that started the child exits, not the
// process (golang.org/issue/27505); the Go runtime keeps its threads unless
// a goroutine exits while locked to one, which this package never does.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
