package server

import (
	"log/slog"

	"io"
	"net"
	"net/http"
	"os"
	"testing"

	"github.com/tetherhq/tether/internal/logging"
	"github.com/tetherhq/tether/internal/testutil/syncbuf"
)

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func slogTo(b *syncbuf.Buffer) *slog.Logger { return slog.New(logging.NewTextHandler(b, nil)) }
