//go:build unix && !linux

package localkube

import "syscall"

// sysProcAttr puts a child in its own process group, so that stop reaches
// anything it starts. Only Linux can also kill it when this process dies; on
// other systems a killed test binary may leave its children running.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
