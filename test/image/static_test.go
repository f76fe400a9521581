// Package image checks what the Dockerfile builds, without Docker: the
// Dockerfile builds the binary with `make static`, and this test runs that
// same target and reads the result. The image (distroless static, no libc)
// needs a binary that is static, and people need one that says its version.
package image

import (
	"bufio"
	"debug/buildinfo"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

const testVersion = "v9.8.7-image-test"

func TestDockerfileBuildsWithMakeStatic(t *testing.T) {
	runs := dockerfileRuns(t)
	var build string
	for _, r := range runs {
		if strings.Contains(r, "make static") {
			build = r
		}
	}
	if build == "" {
		t.Fatalf("no RUN line of the Dockerfile runs `make static`: %q", runs)
	}
	if !strings.Contains(build, `VERSION="$VERSION"`) {
		t.Errorf("the Dockerfile's build doesn't pass its VERSION: %q", build)
	}
	df := readDockerfile(t)
	for _, want := range []string{"FROM gcr.io/distroless/static:nonroot", `ENTRYPOINT ["/tether"]`, "USER 65532:65532"} {
		if !strings.Contains(df, want) {
			t.Errorf("the Dockerfile has no %q", want)
		}
	}
}

func TestMakeStaticBuildsAStaticBinary(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads the binary as ELF")
	}
	out := filepath.Join(t.TempDir(), "tether")
	cmd := exec.Command("make", "-s", "static", "VERSION="+testVersion, "OUT="+out)
	cmd.Dir = filepath.Join("..", "..")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make static: %v\n%s", err, b)
	}

	f, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary names a dynamic loader (PT_INTERP): distroless/static has none")
		}
		if p.Type == elf.PT_DYNAMIC {
			t.Error("the binary has a dynamic section")
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("the binary needs shared libraries %q (%v)", libs, err)
	}

	info, err := buildinfo.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if settings["CGO_ENABLED"] != "0" {
		t.Errorf("built with CGO_ENABLED=%q, want 0", settings["CGO_ENABLED"])
	}
	if settings["-trimpath"] != "true" {
		t.Errorf("built without -trimpath: %q", settings)
	}
	if info.Path != "github.com/tetherhq/tether/cmd/tether" {
		t.Errorf("built %s, want cmd/tether", info.Path)
	}

	b, err := exec.Command(out, "version").CombinedOutput()
	if err != nil || strings.TrimSpace(string(b)) != "tether "+testVersion {
		t.Errorf("tether version: %v, %q; want %q", err, b, "tether "+testVersion)
	}
	// No path of this machine in the binary.
	wd, _ := os.Getwd()
	bin, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if root := filepath.Dir(filepath.Dir(wd)); strings.Contains(string(bin), root) {
		t.Errorf("the binary holds the source path %s", root)
	}
}

func readDockerfile(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// dockerfileRuns returns the Dockerfile's RUN instructions.
func dockerfileRuns(t *testing.T) []string {
	var runs []string
	sc := bufio.NewScanner(strings.NewReader(readDockerfile(t)))
	for sc.Scan() {
		if r, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "RUN "); ok {
			runs = append(runs, r)
		}
	}
	return runs
}
