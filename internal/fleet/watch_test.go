package fleet

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/listfile"
	"github.com/tetherhq/tether/internal/testutil/syncbuf"
)

// watched starts Watch on the agents file at path and stops it when the test ends. Changes
// arrive on the returned channel; the log is in the returned buffer.
func watched(t *testing.T, path string) (*Agents, <-chan Change, *syncbuf.Buffer) {
	t.Helper()
	changes := make(chan Change, 16)
	logs := &syncbuf.Buffer{}
	agents, err := Load(Config{
		AgentsFile:   path,
		Logger:       slog.New(slog.NewTextHandler(logs, nil)),
		Debounce:     10 * time.Millisecond,
		PollInterval: -1, // only events, so these tests prove events work
		OnChange:     func(c Change) { changes <- c },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- agents.Watch(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch: %v", err)
		}
	})
	return agents, changes, logs
}

func entry(name, hash string) string { return "- {name: " + name + ", tokenSha256: " + hash + "}\n" }

func TestWatchReloadsFile(t *testing.T) {
	path := writeFile(t, t.TempDir(), "agents.yaml", entry("a", hash1))
	agents, changes, logs := watched(t, path)

	writeFile(t, filepath.Dir(path), "agents.yaml", entry("a", hash1)) // same content: nothing to do
	writeFile(t, filepath.Dir(path), "agents.yaml", entry("a", hash2)+entry("b", hash1))
	c := nextChange(t, changes)
	if strings.Join(c.Added, ",") != "b" || strings.Join(c.TokensRevoked, ",") != "a" {
		t.Fatalf("change = %+v", c)
	}
	if _, ok := agents.Authenticate("a", token2); !ok {
		t.Fatal("the new token doesn't work")
	}
	waitFor(t, func() bool {
		return strings.Contains(logs.String(), `Reloaded the agents list: added \"b\"; changed \"a\"; tokens revoked \"a\"`)
	}, logs)

	// A bad list keeps the last good one in force, and says why.
	writeFile(t, filepath.Dir(path), "agents.yaml", entry("a", hash2)+"- {name: Bad, tokenSha256: "+hash1+"}\n")
	waitFor(t, func() bool {
		return strings.Contains(logs.String(), `The agents list has an error; keeping the last good one`) &&
			strings.Contains(logs.String(), `TETHER_FLEET_AGENTS_FILE[1] (\"Bad\") needs a name that is a DNS label`)
	}, logs)
	if _, ok := agents.Lookup("b"); !ok {
		t.Fatal("a bad list replaced the good one")
	}

	// Removed, then made again.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		return strings.Contains(logs.String(), "Can't read the agents list; keeping the last good one")
	}, logs)
	if _, ok := agents.Lookup("b"); !ok {
		t.Fatal("a missing file dropped the list")
	}
	writeFile(t, filepath.Dir(path), "agents.yaml", entry("c", hash1))
	if c := nextChange(t, changes); strings.Join(c.Added, ",") != "c" || strings.Join(c.Removed, ",") != "a,b" {
		t.Fatalf("change = %+v", c)
	}
}

// TestWatchKubernetesSecret updates the file the way the kubelet updates a mounted Secret: the
// file is a symlink through ..data, and ..data is swapped atomically to a new directory.
func TestWatchKubernetesSecret(t *testing.T) {
	dir := t.TempDir()
	mustDo(t, os.Mkdir(filepath.Join(dir, "..data_1"), 0o755))
	writeFile(t, filepath.Join(dir, "..data_1"), "agents.yaml", entry("a", hash1))
	mustDo(t, os.Symlink("..data_1", filepath.Join(dir, "..data")))
	mustDo(t, os.Symlink("..data/agents.yaml", filepath.Join(dir, "agents.yaml")))
	agents, changes, _ := watched(t, filepath.Join(dir, "agents.yaml"))

	swap := func(n, content string) {
		mustDo(t, os.Mkdir(filepath.Join(dir, "..data_"+n), 0o755))
		writeFile(t, filepath.Join(dir, "..data_"+n), "agents.yaml", content)
		mustDo(t, os.Symlink("..data_"+n, filepath.Join(dir, "..data_tmp")))
		mustDo(t, os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")))
	}
	swap("2", entry("a", hash2))
	mustDo(t, os.RemoveAll(filepath.Join(dir, "..data_1")))
	if c := nextChange(t, changes); strings.Join(c.TokensRevoked, ",") != "a" {
		t.Fatalf("change = %+v", c)
	}
	if _, ok := agents.Authenticate("a", token2); !ok {
		t.Fatal("the swapped-in token doesn't work")
	}
	swap("3", entry("a", hash2)+entry("b", hash2))
	if c := nextChange(t, changes); strings.Join(c.Added, ",") != "b" {
		t.Fatalf("change = %+v", c)
	}
}

// TestWatchCatchesUpAtStart: a change between Load and Watch is not lost.
func TestWatchCatchesUpAtStart(t *testing.T) {
	path := writeFile(t, t.TempDir(), "agents.yaml", entry("a", hash1))
	agents, err := Load(Config{AgentsFile: path, PollInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Dir(path), "agents.yaml", entry("b", hash1))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- agents.Watch(ctx) }()
	waitFor(t, func() bool { _, ok := agents.Lookup("b"); return ok }, nil)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestWatchWithoutFile(t *testing.T) {
	ctx := t.Context()
	if err := (*Agents)(nil).Watch(ctx); err != nil {
		t.Fatal(err)
	}
	agents, err := Load(Config{Agents: entry("a", hash1)})
	if err != nil {
		t.Fatal(err)
	}
	if err := agents.Watch(ctx); err != nil { // returns at once: nothing to watch
		t.Fatal(err)
	}
}

const deadline = 5 * time.Second

func nextChange(t *testing.T, changes <-chan Change) Change {
	t.Helper()
	select {
	case c := <-changes:
		return c
	case <-time.After(deadline):
		t.Fatal("no reload")
	}
	return Change{}
}

func waitFor(t *testing.T, cond func() bool, logs *syncbuf.Buffer) {
	t.Helper()
	for end := time.Now().Add(deadline); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			if logs != nil {
				t.Logf("log:\n%s", logs)
			}
			t.Fatal("timed out")
		}
	}
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestWatchKeepsExtra: the entries of the clusters the hub reaches itself
// stay through every reload, and a list that takes one of their names is
// refused like any bad list.
func TestWatchKeepsExtra(t *testing.T) {
	path := writeFile(t, t.TempDir(), "agents.yaml", entry("a", hash1))
	changes := make(chan Change, 16)
	logs := &syncbuf.Buffer{}
	agents, err := Load(Config{
		AgentsFile: path, Logger: slog.New(slog.NewTextHandler(logs, nil)), Debounce: 10 * time.Millisecond, PollInterval: -1,
		OnChange: func(c Change) { changes <- c },
		Extra:    []Agent{{Name: "staging", TokenHashes: []listfile.Hash{listfile.HashToken(token2)}, Groups: Groups{Everyone: true}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- agents.Watch(ctx) }()
	defer func() { cancel(); <-done }()

	writeFile(t, filepath.Dir(path), "agents.yaml", entry("b", hash1))
	if c := nextChange(t, changes); strings.Join(c.Added, ",") != "b" || strings.Join(c.Removed, ",") != "a" {
		t.Fatalf("change = %+v", c)
	}
	if _, ok := agents.Authenticate("staging", token2); !ok {
		t.Fatal("a reload dropped the extra entry")
	}
	writeFile(t, filepath.Dir(path), "agents.yaml", entry("b", hash1)+entry("staging", hash1))
	waitFor(t, func() bool {
		return strings.Contains(logs.String(), `TETHER_FLEET_AGENTS_FILE[1] (\"staging\") has the name of a cluster in TETHER_FLEET_CLUSTERS`)
	}, logs)
	if _, ok := agents.Authenticate("staging", token2); !ok {
		t.Fatal("a list taking the extra entry's name replaced it")
	}
}
