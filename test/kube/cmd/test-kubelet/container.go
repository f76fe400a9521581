//go:build unix

package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// runSpec is a container resolved for running: what exec also needs.
type runSpec struct {
	name      string
	argv      []string
	env       []string
	dir       string
	stdin     bool
	stdinOnce bool
	tty       bool
}

// instance is one run of a container: a process group whose output goes
// to a log file and to whoever is attached. Its goroutines (a waiter and
// one output copier per pipe) end when the process group's output closes,
// which the waiter forces by killing the group once the first process
// exits.
type instance struct {
	id      string // containerID in the Pod's status
	spec    runSpec
	started metav1.Time
	log     *logFile
	stdout  fanout
	stderr  fanout // unused with a TTY, whose output is all stdout

	stdinW    io.WriteCloser // the process's stdin; nil without spec.stdin
	closeOnce sync.Once
	pty       *os.File // the terminal's controller, with spec.tty

	pid  int                          // leads the process group
	done chan struct{}                // closed when the run is over and its output copied
	term *v1.ContainerStateTerminated // how it ended; written before done closes

	execsMu sync.Mutex             // guards execs
	execs   map[*exec.Cmd]struct{} // exec'd processes, which die with the run; nil after
}

// startInstance starts spec as a process group with its output going to
// logPath, and calls onExit once the run is over. When the process can't
// start, it returns an instance already over (exit code 128, StartError,
// as container runtimes report it) and the error, and has called onExit.
func startInstance(log *slog.Logger, spec runSpec, logPath string, onExit func()) (*instance, error) {
	in := &instance{
		id:      "local-process://" + randomID(),
		spec:    spec,
		started: metav1.Now(),
		done:    make(chan struct{}),
		execs:   make(map[*exec.Cmd]struct{}),
	}
	fail := func(err error) (*instance, error) {
		in.term = &v1.ContainerStateTerminated{ExitCode: 128, Reason: "StartError", Message: err.Error(),
			StartedAt: in.started, FinishedAt: metav1.Now(), ContainerID: in.id}
		if in.log != nil {
			in.log.close()
		}
		close(in.done)
		onExit()
		return in, err
	}
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return fail(err)
	}
	lf, err := createLog(logPath)
	if err != nil {
		return fail(err)
	}
	in.log = lf

	cmd := exec.Command(spec.argv[0], spec.argv[1:]...)
	cmd.Env, cmd.Dir = spec.env, spec.dir
	cmd.SysProcAttr = sysProcAttr(spec.tty)
	var parentEnds, childEnds []*os.File // closed in the parent after Start
	defer func() {
		for _, f := range childEnds {
			f.Close()
		}
	}()
	var outR, errR *os.File
	if spec.tty {
		ptm, pts, err := openPTY()
		if err != nil {
			return fail(err)
		}
		in.pty, outR = ptm, ptm
		cmd.Stdin, cmd.Stdout, cmd.Stderr = pts, pts, pts
		childEnds = append(childEnds, pts)
		if spec.stdin {
			in.stdinW = ptm
		}
	} else {
		var outW, errW *os.File
		if outR, outW, err = os.Pipe(); err != nil {
			return fail(err)
		}
		if errR, errW, err = os.Pipe(); err != nil {
			outR.Close()
			outW.Close()
			return fail(err)
		}
		cmd.Stdout, cmd.Stderr = outW, errW
		parentEnds = append(parentEnds, outR, errR)
		childEnds = append(childEnds, outW, errW)
		if spec.stdin {
			r, w, err := os.Pipe()
			if err != nil {
				return fail(errors.Join(err, closeAll(parentEnds)))
			}
			cmd.Stdin, in.stdinW = r, w
			childEnds = append(childEnds, r)
			parentEnds = append(parentEnds, w)
		}
	}
	if err := cmd.Start(); err != nil {
		if in.pty != nil {
			in.pty.Close()
		}
		return fail(errors.Join(err, closeAll(parentEnds)))
	}
	in.pid = cmd.Process.Pid
	log.Info("Started a container", "container", spec.name, "id", in.id, "pid", in.pid, "argv", spec.argv)

	var copiers sync.WaitGroup
	copiers.Go(func() { in.copyOutput(outR, "stdout", &in.stdout) })
	if errR != nil {
		copiers.Go(func() { in.copyOutput(errR, "stderr", &in.stderr) })
	}
	go func() {
		err := cmd.Wait()
		// The first process is gone: as in a PID namespace, so is the rest.
		syscall.Kill(-in.pid, syscall.SIGKILL)
		in.killExecs()
		copiers.Wait()
		if outR != in.pty {
			outR.Close()
		}
		if errR != nil {
			errR.Close()
		}
		if in.stdinW != nil {
			in.closeStdin()
		}
		if in.pty != nil {
			in.pty.Close()
		}
		in.log.close()
		in.term = terminated(in, cmd.ProcessState, err)
		close(in.done)
		onExit()
	}()
	return in, nil
}

func closeAll(files []*os.File) error {
	var errs []error
	for _, f := range files {
		errs = append(errs, f.Close())
	}
	return errors.Join(errs...)
}

// terminated describes how the run ended, as a runtime reports it: a
// process killed by a signal exits with 128 plus the signal's number.
func terminated(in *instance, ps *os.ProcessState, waitErr error) *v1.ContainerStateTerminated {
	t := &v1.ContainerStateTerminated{StartedAt: in.started, FinishedAt: metav1.Now(), ContainerID: in.id, Reason: "Completed"}
	switch {
	case ps == nil:
		t.ExitCode, t.Reason, t.Message = 128, "Error", fmt.Sprint(waitErr)
	case ps.ExitCode() >= 0:
		t.ExitCode = int32(ps.ExitCode())
	default:
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			t.ExitCode = 128 + int32(ws.Signal())
		} else {
			t.ExitCode = 128
		}
	}
	if t.ExitCode != 0 {
		t.Reason = "Error"
	}
	return t
}

// copyOutput copies one of the process's outputs to the log and to whoever
// is attached, until the process group closes it (EIO for a terminal).
func (in *instance) copyOutput(r *os.File, stream string, f *fanout) {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			in.log.write(stream, buf[:n])
			f.write(buf[:n])
		}
		if err != nil {
			return
		}
	}
}

func (in *instance) exited() bool {
	select {
	case <-in.done:
		return true
	default:
		return false
	}
}

// result is how the run ended; nil while it runs.
func (in *instance) result() *v1.ContainerStateTerminated {
	if !in.exited() {
		return nil
	}
	t := *in.term
	return &t
}

// closeStdin closes the process's stdin (for stdinOnce, once the first
// attached client's input ends).
func (in *instance) closeStdin() {
	in.closeOnce.Do(func() {
		if in.pty == nil {
			in.stdinW.Close()
		}
	})
}

// stop sends SIGTERM to the process group, SIGKILL after grace or when ctx
// ends, and returns when the run is over.
func (in *instance) stop(ctx context.Context, grace time.Duration) {
	if in.exited() {
		return
	}
	syscall.Kill(-in.pid, syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-in.done:
		return
	case <-t.C:
	case <-ctx.Done():
	}
	syscall.Kill(-in.pid, syscall.SIGKILL)
	<-in.done
}

// addExec records an exec'd process so that it dies with the container;
// false if the container is already over.
func (in *instance) addExec(cmd *exec.Cmd) bool {
	in.execsMu.Lock()
	defer in.execsMu.Unlock()
	if in.execs == nil {
		return false
	}
	in.execs[cmd] = struct{}{}
	return true
}

func (in *instance) removeExec(cmd *exec.Cmd) {
	in.execsMu.Lock()
	defer in.execsMu.Unlock()
	delete(in.execs, cmd)
}

func (in *instance) killExecs() {
	in.execsMu.Lock()
	defer in.execsMu.Unlock()
	for cmd := range in.execs {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	in.execs = nil
}

// fanout copies a container's output to the clients attached to it.
// Writes are synchronous: a client that stops reading stalls the
// container's output, as a full pipe would.
type fanout struct {
	mu   sync.Mutex // guards subs
	subs map[*subscriber]struct{}
}

// subscriber is one attached client's output; failed closes when a write
// to it fails (the client went away) and it is dropped.
type subscriber struct {
	w      io.Writer
	failed chan struct{}
}

func (f *fanout) subscribe(w io.Writer) *subscriber {
	s := &subscriber{w: w, failed: make(chan struct{})}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.subs == nil {
		f.subs = make(map[*subscriber]struct{})
	}
	f.subs[s] = struct{}{}
	return s
}

func (f *fanout) unsubscribe(s *subscriber) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.subs, s)
}

func (f *fanout) write(p []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for s := range f.subs {
		if _, err := s.w.Write(p); err != nil {
			delete(f.subs, s)
			close(s.failed)
		}
	}
}

func randomID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}
