//go:build unix && !linux

package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"syscall"
)

// sysProcAttr makes a container's or an exec's process lead a process
// group of its own, so that signals reach all it starts. Only Linux can
// also kill it when the kubelet dies.
func sysProcAttr(tty bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// openPTY is not written for this system: containers and execs with a
// TTY fail to start.
func openPTY() (ptm, pts *os.File, err error) {
	return nil, nil, fmt.Errorf("terminals on %s: %w", runtime.GOOS, errors.ErrUnsupported)
}

func setPTYSize(*os.File, uint16, uint16) error { return errors.ErrUnsupported }
