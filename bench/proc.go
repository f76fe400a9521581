package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// child is a process the bench started: a hub, an agent, a relay. Each is
// this binary run again with "child <role>", or the tether binary, so that
// its CPU time and memory are its own.
type child struct {
	name  string
	cmd   *exec.Cmd
	ready []string // the words after READY on its first such line
	done  chan struct{}
}

// startChild runs argv with env added, its stderr to logPath, and waits for
// a line "READY ..." on its stdout when waitReady.
func startChild(ctx context.Context, name string, argv, env []string, logPath string, waitReady bool) (*child, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, done: make(chan struct{})}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sent := false
		for sc.Scan() {
			if !sent && strings.HasPrefix(sc.Text(), "READY") {
				lines <- sc.Text()
				sent = true
			}
		}
		io.Copy(io.Discard, out)
	}()
	go func() { cmd.Wait(); logf.Close(); close(c.done) }()
	if !waitReady {
		return c, nil
	}
	select {
	case l := <-lines:
		c.ready = strings.Fields(l)[1:]
		return c, nil
	case <-c.done:
		return nil, fmt.Errorf("%s exited before it was ready; see %s", name, logPath)
	case <-time.After(2 * time.Minute):
		c.kill()
		return nil, fmt.Errorf("%s not ready in 2 min; see %s", name, logPath)
	case <-ctx.Done():
		c.kill()
		return nil, ctx.Err()
	}
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// cpu is the process's user+system CPU time so far, from /proc.
func (c *child) cpu() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.pid()))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	// fields after the command: state is f[0]; utime is field 14, f[11].
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ is 100 on Linux
}

// rss is the process's resident set in bytes.
func (c *child) rss() int64 { return rssOf(c.pid()) }

func rssOf(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			kb, _ := strconv.ParseInt(strings.Fields(l)[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// stop sends SIGTERM and waits up to grace, then kills.
func (c *child) stop(grace time.Duration) {
	select {
	case <-c.done:
		return
	default:
	}
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(grace):
		c.kill()
	}
}

func (c *child) kill() {
	c.cmd.Process.Kill()
	<-c.done
}

// getJSON fetches a child's stats endpoint.
func getJSON(url string, out any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}
