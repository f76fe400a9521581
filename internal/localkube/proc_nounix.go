//go:build !unix

package localkube

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"syscall"
)

// errLocked means another process holds the lock.
var errLocked = errors.New("locked by another process")

// tryLock fails: this package runs its children with Unix process groups
// and signals, so Binaries stops here, before building anything.
func tryLock(*os.File) error {
	return fmt.Errorf("a local Kubernetes API server needs Linux or macOS, not %s: %w", runtime.GOOS, errors.ErrUnsupported)
}

func sysProcAttr() *syscall.SysProcAttr { return nil }

func terminate(p *os.Process) { p.Kill() }

func kill(p *os.Process) { p.Kill() }
