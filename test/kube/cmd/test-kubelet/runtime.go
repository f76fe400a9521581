//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cri-streaming/pkg/streaming"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"
)

// The kubelet is the container runtime the CRI streaming server calls.
var _ streaming.Runtime = (*kubelet)(nil)

// execWaitDelay bounds how long an exec waits for its output after its
// process exits, when something it started in the background still holds
// the output open.
const execWaitDelay = 2 * time.Second

// running returns the current run of a container named by containerID.
func (k *kubelet) running(id string) (*instance, error) {
	uid, name, _ := strings.Cut(id, "/")
	p := k.podByUID(types.UID(uid))
	if p == nil {
		return nil, fmt.Errorf("no pod with UID %q on this node", uid)
	}
	_, cur, _, ok := p.container(name)
	if !ok || cur == nil || cur.exited() {
		return nil, fmt.Errorf("container %q of pod %s/%s is not running", name, p.namespace, p.name)
	}
	return cur, nil
}

// Exec runs cmd with the container's environment and working directory,
// in a process group of its own that dies with the container (or the
// kubelet). A nonzero exit is a utilexec.ExitError, which the streaming
// server sends on as the exit code.
//
// The goroutine copying the client's stdin ends when that stream does,
// which is at the latest when the streaming server closes the connection
// after Exec returns.
func (k *kubelet) Exec(_ context.Context, id string, argv []string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
	run, err := k.running(id)
	if err != nil {
		return err
	}
	if len(argv) == 0 {
		return errors.New("no command to run")
	}
	cmd := exec.CommandContext(k.life, argv[0], argv[1:]...)
	cmd.Env, cmd.Dir = run.spec.env, run.spec.dir
	cmd.SysProcAttr = sysProcAttr(tty)
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = execWaitDelay

	var ptm *os.File
	if tty {
		var pts *os.File
		if ptm, pts, err = openPTY(); err != nil {
			return err
		}
		defer ptm.Close()
		// The client sends its terminal's size as it starts; wait a moment
		// for it, so the command starts with the right size instead of 0 0
		// (`stty size` at once would otherwise race the first resize).
		select {
		case size, ok := <-resize:
			if ok {
				setPTYSize(ptm, size.Height, size.Width)
			}
		case <-time.After(time.Second):
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = pts, pts, pts
		err = cmd.Start()
		pts.Close()
	} else {
		var stdin io.WriteCloser
		if in != nil {
			if stdin, err = cmd.StdinPipe(); err != nil {
				return err
			}
		}
		if out != nil {
			cmd.Stdout = out
		}
		if errOut != nil {
			cmd.Stderr = errOut
		}
		err = cmd.Start()
		if err == nil && stdin != nil {
			go func() {
				io.Copy(stdin, in)
				stdin.Close()
			}()
		}
	}
	if err != nil {
		return err
	}
	if !run.addExec(cmd) {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	defer run.removeExec(cmd)

	if ptm != nil {
		stop := make(chan struct{})
		defer close(stop)
		go resizeLoop(ptm, resize, stop)
		if in != nil {
			go io.Copy(ptm, in)
		}
		copied := make(chan struct{})
		go func() {
			defer close(copied)
			if out != nil {
				io.Copy(out, ptm) // until EIO: every holder of the terminal is gone
			}
		}()
		err = cmd.Wait()
		select {
		case <-copied:
		case <-time.After(execWaitDelay):
			ptm.Close()
			<-copied
		}
	} else {
		err = cmd.Wait()
	}
	return exitError(err)
}

// exitError turns an exec'd process's end into what the streaming server
// reports: nil for exit 0 (also when only the wait for its output timed
// out), a utilexec.CodeExitError with the code otherwise (128 plus the
// signal's number for a signal, as a shell reports it).
func exitError(err error) error {
	var ee *exec.ExitError
	switch {
	case err == nil || errors.Is(err, exec.ErrWaitDelay):
		return nil
	case errors.As(err, &ee):
		code := ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
		return utilexec.CodeExitError{Err: err, Code: code}
	}
	return err
}

// resizeLoop applies the client's terminal sizes until stop closes or the
// client stops sending them.
func resizeLoop(ptm *os.File, resize <-chan remotecommand.TerminalSize, stop <-chan struct{}) {
	for {
		select {
		case size, ok := <-resize:
			if !ok {
				return
			}
			setPTYSize(ptm, size.Height, size.Width)
		case <-stop:
			return
		}
	}
}

// Attach connects the client to the container's current run: its output
// from now on, and its stdin if the container has one. The attach ends
// when the run does, when the client goes away, or, unless the container
// is stdinOnce, when the client's input ends. With stdinOnce, the end of
// the client's input closes the container's stdin.
func (k *kubelet) Attach(_ context.Context, id string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
	run, err := k.running(id)
	if err != nil {
		return err
	}
	var outFailed, errFailed, stdinDone <-chan struct{}
	if out != nil {
		s := run.stdout.subscribe(out)
		defer run.stdout.unsubscribe(s)
		outFailed = s.failed
	}
	if errOut != nil && !run.spec.tty {
		s := run.stderr.subscribe(errOut)
		defer run.stderr.unsubscribe(s)
		errFailed = s.failed
	}
	if tty && run.pty != nil {
		stop := make(chan struct{})
		defer close(stop)
		go resizeLoop(run.pty, resize, stop)
	}
	if in != nil && run.stdinW != nil {
		done := make(chan struct{})
		stdinDone = done
		// Ends with the client's input; see Exec.
		go func() {
			defer close(done)
			io.Copy(run.stdinW, in)
			if run.spec.stdinOnce {
				run.closeStdin()
			}
		}()
	}
	for {
		select {
		case <-run.done:
			return nil
		case <-outFailed:
			return nil
		case <-errFailed:
			return nil
		case <-stdinDone:
			if !run.spec.stdinOnce {
				return nil
			}
			stdinDone = nil
		}
	}
}

// PortForward connects stream to 127.0.0.1:port, where the Pod's
// processes listen since they share this machine's network. It returns
// when the server's side ends, having closed its write half of the
// connection when the client's side ended. The goroutine copying from the
// client ends when the stream does, which the streaming server closes
// after PortForward returns.
func (k *kubelet) PortForward(_ context.Context, podUID string, port int32, stream io.ReadWriteCloser) error {
	if k.podByUID(types.UID(podUID)) == nil {
		return fmt.Errorf("no pod with UID %q on this node", podUID)
	}
	conn, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))))
	if err != nil {
		return err
	}
	defer conn.Close()
	go func() {
		io.Copy(conn, stream)
		conn.(*net.TCPConn).CloseWrite()
	}()
	_, err = io.Copy(stream, conn)
	return err
}
