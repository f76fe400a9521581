package localkube

import (
	"log/slog"
	"os"
	"path/filepath"
)

// A cluster's directory holds its keys, tokens and etcd's data (about 120
// MiB). Close removes it, but a process killed first (a test's timeout, a
// SIGKILL) can't, so each Start removes the directories whose owner is
// gone: ownerFile in each is locked by the process that made it, and the
// lock goes with the process.
const (
	dirPattern = "localkube-"
	ownerFile  = "owner.lock"
)

// own locks dir's ownerFile for this process, and returns the file: closing
// it gives up the lock. The file is locked under another name and then
// renamed, so that ownerFile never exists unlocked while its owner lives:
// a sweep by another process starting at the same moment would take it
// for a dead run's and remove the new directory.
func own(dir string) (*os.File, error) {
	f, err := os.CreateTemp(dir, ".owner-")
	if err != nil {
		return nil, err
	}
	if err := tryLock(f); err != nil {
		f.Close()
		return nil, err
	}
	if err := os.Rename(f.Name(), filepath.Join(dir, ownerFile)); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// sweep removes the cluster directories in tmp (os.TempDir when empty)
// whose owner is gone. A directory without ownerFile is left alone: it is
// being made, or another program's.
func sweep(tmp string, log *slog.Logger) {
	if tmp == "" {
		tmp = os.TempDir()
	}
	dirs, _ := filepath.Glob(filepath.Join(tmp, dirPattern+"*"))
	for _, dir := range dirs {
		f, err := os.OpenFile(filepath.Join(dir, ownerFile), os.O_RDWR, 0)
		if err != nil {
			continue
		}
		if tryLock(f) == nil {
			if err := os.RemoveAll(dir); err == nil {
				log.Info("Removed the directory of a local API server whose process is gone", "dir", dir)
			}
		}
		f.Close()
	}
}
