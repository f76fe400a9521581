//go:build unix

package localkube

import (
	"errors"
	"os"
	"syscall"
)

// errLocked means another process holds the lock.
var errLocked = errors.New("locked by another process")

// tryLock takes an exclusive flock on f without waiting. Closing f releases
// it, also when the process dies, so a killed build never leaves it held.
func tryLock(f *os.File) error {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) || errors.Is(err, syscall.EINTR) {
		return errLocked
	}
	return err
}

// terminate asks a child's process group (sysProcAttr gives each child its
// own, named for its pid) to stop.
func terminate(p *os.Process) { syscall.Kill(-p.Pid, syscall.SIGTERM) }

// kill ends a child's process group at once.
func kill(p *os.Process) { syscall.Kill(-p.Pid, syscall.SIGKILL) }
