package localkube

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

// process is one child (etcd or kube-apiserver) whose output goes to a file.
type process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{} // closed when the child has exited and been waited for
	err     error         // cmd.Wait's result; read only after done
}

// startProcess starts path with args in a process group of its own, its
// stdout and stderr appended to logPath. One goroutine waits for it; it ends
// when the child does, and stop makes sure the child does.
func startProcess(name, path string, args []string, logPath string) (*process, error) {
	f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close() // the child has its own copy
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = f, f // *os.File: no copying goroutines
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the child has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the child's process group, SIGKILL if it is still
// there after grace, and returns once it has been waited for.
func (p *process) stop(grace time.Duration) {
	if !p.exited() {
		terminate(p.cmd.Process)
		select {
		case <-p.done:
		case <-time.After(grace):
		}
	}
	// Whatever the child left in its group goes too.
	kill(p.cmd.Process)
	<-p.done
}

// exitStatus says how the child ended, for errors. Valid after done.
func (p *process) exitStatus() string {
	if p.err == nil {
		return "exit status 0"
	}
	return p.err.Error()
}

// tail returns the last lines of the child's output, headed by its name,
// for errors. The log file itself goes when the cluster's directory does.
func (p *process) tail() string {
	b, err := readTail(p.logPath, 4<<10)
	if err != nil {
		return fmt.Sprintf("no output from %s: %v", p.name, err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 25 {
		lines = lines[len(lines)-25:]
	}
	return fmt.Sprintf("last lines of %s:\n  %s", p.name, strings.Join(lines, "\n  "))
}

// readTail reads up to n bytes from the end of a file, starting at a line.
func readTail(path string, n int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	off := max(st.Size()-n, 0)
	b, err := io.ReadAll(io.NewSectionReader(f, off, st.Size()-off))
	if err != nil {
		return nil, err
	}
	if off > 0 {
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return b, nil
}

// errExited is wrapped by start-up errors where a child ended by itself;
// errPortTaken when it ended because another process had taken its port.
var (
	errExited    = errors.New("exited during start-up")
	errPortTaken = fmt.Errorf("%w, its port taken", errExited)
)
