// Package files changes files in tests the way Kubernetes and editors do.
package files

import (
	"os"
	"path/filepath"
	"testing"
)

// Replace writes content to path whole: a new file beside it, renamed into
// place, so a watcher never reads it half written.
func Replace(t testing.TB, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
