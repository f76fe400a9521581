//go:build unix

package localkube

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

func TestSweepRemovesOnlyDirectoriesWhoseOwnerIsGone(t *testing.T) {
	tmp := t.TempDir()
	mkdir := func(name string) string {
		dir := filepath.Join(tmp, name)
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "token"), []byte("secret"), 0o600); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	// Owned by a running cluster: its lock is held.
	running := mkdir(dirPattern + "running")
	owner, err := own(running)
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	// Its owner gone: a lock nobody holds, as a killed process leaves it.
	gone := mkdir(dirPattern + "gone")
	f, err := own(gone)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	// Being made (no lock file yet), and another program's.
	young := mkdir(dirPattern + "young")
	other := mkdir("other-program")
	if err := os.WriteFile(filepath.Join(other, ownerFile), nil, 0o600); err != nil {
		t.Fatal(err)
	}

	sweep(tmp, slog.New(slog.DiscardHandler))

	if _, err := os.Stat(gone); !os.IsNotExist(err) {
		t.Errorf("%s is still there (%v); its owner is gone", gone, err)
	}
	for _, dir := range []string{running, young, other} {
		if _, err := os.Stat(filepath.Join(dir, "token")); err != nil {
			t.Errorf("sweep took %s: %v", dir, err)
		}
	}
	// The running cluster's lock is still held.
	g, err := os.Open(filepath.Join(running, ownerFile))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := tryLock(g); !errors.Is(err, errLocked) {
		t.Errorf("locking the running cluster's owner file: %v, want errLocked", err)
	}
}
