package localkube

import (
	"bytes"
	"log/slog"
	"sync"
	"time"
)

// progressEvery is how often a build says it is still going: a first build
// of Kubernetes runs for many minutes, and a silent one looks hung.
const progressEvery = 30 * time.Second

// firstBuild says, up front, how long the first build of Kubernetes takes:
// about 15 minutes on two cores, with an empty Go build cache.
const firstBuild = "the first build takes about 15 minutes on two cores (later runs reuse it)"

// progress reads `go build -v`'s output, one package per line as each is
// compiled, and keeps the count and the latest for the progress lines.
type progress struct {
	what  string // what is being built, for the log lines
	start time.Time
	out   *tailBuffer // everything written, for an error's message

	mu      sync.Mutex // guards the following
	partial []byte     // a line not yet ended
	count   int        // packages compiled
	last    string     // the latest of them
}

func newProgress(what string, start time.Time, out *tailBuffer) *progress {
	return &progress{what: what, start: start, out: out}
}

func (p *progress) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.out.Write(b)
	p.partial = append(p.partial, b...)
	for {
		i := bytes.IndexByte(p.partial, '\n')
		if i < 0 {
			break
		}
		line := string(bytes.TrimSpace(p.partial[:i]))
		p.partial = p.partial[i+1:]
		// go build -v prints import paths; anything with a space is a
		// compiler's message, not a package.
		if line != "" && !bytes.ContainsAny([]byte(line), " \t") {
			p.count++
			p.last = line
		}
	}
	// A line with no end in sight is no package name: keep it bounded.
	if len(p.partial) > 4<<10 {
		p.partial = p.partial[:0]
	}
	return len(b), nil
}

// report logs one progress line as of now.
func (p *progress) report(log *slog.Logger, now time.Time) {
	p.mu.Lock()
	count, last := p.count, p.last
	p.mu.Unlock()
	log.Info("Still building "+p.what,
		"elapsed", now.Sub(p.start).Round(time.Second).String(), "packages", count, "latest", last)
}

// every logs a progress line each interval until stop is closed, and returns
// once it has stopped.
func (p *progress) every(log *slog.Logger, interval time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			p.report(log, now)
		}
	}
}
