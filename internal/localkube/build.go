package localkube

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// module is the path of Tether's main module, whose go.mod marks the root of
// the source tree that holds the build modules.
const module = "github.com/tetherhq/tether"

// The build modules, relative to the source tree's root.
const (
	kubeModule = "test/kube"
	etcdModule = "test/etcd"
)

// BuildOptions says where to find the build modules and where to cache what
// they build. The zero value finds the source tree from the working
// directory and caches in the user's cache directory.
type BuildOptions struct {
	// SourceDir is the root of a Tether source tree (the directory of the
	// go.mod of github.com/tetherhq/tether). Empty: the first such
	// directory above the working directory, else above the executable.
	SourceDir string

	// CacheDir holds the built binaries. Empty: "tether" in
	// os.UserCacheDir().
	CacheDir string

	// Logger receives progress; nil discards it.
	Logger *slog.Logger
}

// Paths are the binaries Binaries built, all from the same Kubernetes
// release.
type Paths struct {
	APIServer, Kubectl, Etcd string

	// Kubelet is test-kubelet, which runs a Pod's containers as processes
	// on this machine (see Config.Node).
	Kubelet string

	// ControllerManager is kube-controller-manager (see Config.Controllers).
	ControllerManager string

	// Version is the Kubernetes release they are, like "v1.36.3": what the
	// API server's /version reports as gitVersion.
	Version string
}

// Binaries returns kube-apiserver, kube-controller-manager, kubectl, etcd
// and test-kubelet, building
// whichever are missing from the cache first. The first build takes several
// minutes; later calls only hash a few files.
//
// The cache directory is named for the Kubernetes version and a hash of the
// build modules' files (go.mod, go.sum, .go), so an edit there builds anew
// instead of using stale binaries:
//
//	<CacheDir>/kube-v1.36.3-<hash>/{kube-apiserver,kubectl,test-kubelet,etcd,lock}
//
// Binaries are built under a temporary name and renamed into place, so a
// binary that exists is complete. Processes that call Binaries at once (the
// test binaries of several packages) take turns on an flock of the lock file,
// so one builds and the others wait for it.
func Binaries(ctx context.Context, opts BuildOptions) (Paths, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	src, err := findSource(opts.SourceDir)
	if err != nil {
		return Paths{}, err
	}
	version, err := kubernetesVersion(filepath.Join(src, kubeModule, "go.mod"))
	if err != nil {
		return Paths{}, err
	}
	hash, err := hashModules(src, kubeModule, etcdModule)
	if err != nil {
		return Paths{}, err
	}
	cache := opts.CacheDir
	if cache == "" {
		user, err := os.UserCacheDir()
		if err != nil {
			return Paths{}, fmt.Errorf("localkube: no cache directory: %w", err)
		}
		cache = filepath.Join(user, "tether")
	}
	dir := filepath.Join(cache, "kube-"+version+"-"+hash)
	p := Paths{
		APIServer: filepath.Join(dir, "kube-apiserver"),
		Kubectl:   filepath.Join(dir, "kubectl"),
		Etcd:      filepath.Join(dir, "etcd"),
		Kubelet:   filepath.Join(dir, "test-kubelet"),
		Version:   version,

		ControllerManager: filepath.Join(dir, "kube-controller-manager"),
	}
	if len(missing(p)) == 0 {
		return p, nil
	}

	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Paths{}, fmt.Errorf("localkube: %w", err)
	}
	unlock, err := lock(ctx, log, filepath.Join(dir, "lock"))
	if err != nil {
		return Paths{}, err
	}
	defer unlock()

	// Under the lock, a temporary build directory is one a killed build
	// left behind.
	if stale, err := filepath.Glob(filepath.Join(dir, ".build-*")); err == nil {
		for _, d := range stale {
			os.RemoveAll(d)
		}
	}
	// Another process may have built them while this one waited.
	todo := missing(p)
	kube := map[string]string{
		"./cmd/kube-apiserver": p.APIServer, "./cmd/kube-controller-manager": p.ControllerManager,
		"./cmd/kubectl": p.Kubectl, "./cmd/test-kubelet": p.Kubelet,
	}
	for pkg, out := range kube {
		if !slices.Contains(todo, out) {
			delete(kube, pkg)
		}
	}
	if len(kube) > 0 {
		log.Info("Building kube-apiserver, kube-controller-manager, kubectl and test-kubelet from Kubernetes' Go modules: "+firstBuild+"; a line every 30 s says how far it is",
			"version", version, "dir", dir)
		start := time.Now()
		what := "Kubernetes " + version
		if err := goBuild(ctx, log, what, filepath.Join(src, kubeModule), dir, versionLDFlags(version), kube); err != nil {
			return Paths{}, err
		}
		log.Info("Built kube-apiserver, kube-controller-manager, kubectl and test-kubelet", "version", version, "took", time.Since(start).Round(time.Second))
	}
	if slices.Contains(todo, p.Etcd) {
		log.Info("Building etcd", "dir", dir)
		start := time.Now()
		err := goBuild(ctx, log, "etcd", filepath.Join(src, etcdModule), dir, "", map[string]string{".": p.Etcd})
		if err != nil {
			return Paths{}, err
		}
		log.Info("Built etcd", "took", time.Since(start).Round(time.Second))
	}
	return p, nil
}

// missing returns the paths of p that don't exist yet.
func missing(p Paths) []string {
	var out []string
	for _, f := range []string{p.APIServer, p.ControllerManager, p.Kubectl, p.Etcd, p.Kubelet} {
		if _, err := os.Stat(f); err != nil {
			out = append(out, f)
		}
	}
	return out
}

// findSource returns the root of the Tether source tree: dir if given, else
// the nearest one above the working directory, else above the executable
// (for `tether dev` run from a checkout's bin/).
func findSource(dir string) (string, error) {
	if dir != "" {
		if !isSourceRoot(dir) {
			return "", fmt.Errorf("localkube: %q is not a Tether source tree: it needs a go.mod for %s and %s/go.mod", dir, module, kubeModule)
		}
		return filepath.Abs(dir)
	}
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		if exe, err := filepath.EvalSymlinks(exe); err == nil {
			starts = append(starts, filepath.Dir(exe))
		}
	}
	for _, start := range starts {
		for d := start; ; d = filepath.Dir(d) {
			if isSourceRoot(d) {
				return d, nil
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return "", fmt.Errorf("localkube: can't find Tether's source tree above %s: the Kubernetes API server is built from its %s module, so run this from inside a checkout of %s",
		strings.Join(slices.Compact(starts), " or "), kubeModule, module)
}

func isSourceRoot(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil || modulePath(b) != module {
		return false
	}
	_, err = os.Stat(filepath.Join(dir, kubeModule, "go.mod"))
	return err == nil
}

// modulePath returns the module path a go.mod declares.
func modulePath(gomod []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(gomod))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`)
		}
	}
	return ""
}

// kubernetesVersion returns the version of k8s.io/kubernetes a go.mod
// requires, so that moving the build module to another release also changes
// the version the binaries report.
func kubernetesVersion(gomod string) (string, error) {
	b, err := os.ReadFile(gomod)
	if err != nil {
		return "", fmt.Errorf("localkube: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 1 && f[0] == "require" {
			f = f[1:]
		}
		if len(f) >= 2 && f[0] == "k8s.io/kubernetes" && strings.HasPrefix(f[1], "v1.") {
			return f[1], nil
		}
	}
	return "", fmt.Errorf("localkube: %s requires no k8s.io/kubernetes v1.x", gomod)
}

// versionLDFlags sets the version variables Kubernetes' own build sets
// (hack/lib/version.sh); without them the binaries say v0.0.0-master.
func versionLDFlags(version string) string {
	major, minor, _ := strings.Cut(strings.TrimPrefix(version, "v"), ".")
	minor, _, _ = strings.Cut(minor, ".")
	var flags []string
	for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		flags = append(flags,
			"-X", pkg+".gitVersion="+version,
			"-X", pkg+".gitMajor="+major,
			"-X", pkg+".gitMinor="+minor,
			"-X", pkg+".gitTreeState=clean")
	}
	return strings.Join(flags, " ")
}

// hashModules hashes the files of the build modules that decide what they
// build, and returns the first 12 hex characters.
func hashModules(src string, dirs ...string) (string, error) {
	h := sha256.New()
	// The shape of the link flags counts too: changing them must rebuild.
	fmt.Fprintf(h, "ldflags %s\n", versionLDFlags("v"))
	for _, d := range dirs {
		var files []string
		err := filepath.WalkDir(filepath.Join(src, d), func(path string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			name := e.Name()
			if !e.IsDir() && (name == "go.mod" || name == "go.sum" || strings.HasSuffix(name, ".go")) {
				files = append(files, path)
			}
			return nil
		})
		if err != nil {
			return "", fmt.Errorf("localkube: %w", err)
		}
		slices.Sort(files)
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				return "", fmt.Errorf("localkube: %w", err)
			}
			rel, _ := filepath.Rel(src, f)
			fmt.Fprintf(h, "%s %d\n", filepath.ToSlash(rel), len(b))
			h.Write(b)
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:12], nil
}

// lock takes an exclusive flock on path, polling so that ctx can end the
// wait, and logs once if another process holds it.
func lock(ctx context.Context, log *slog.Logger, path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("localkube: %w", err)
	}
	logged := false
	for {
		err := tryLock(f)
		if err == nil {
			return func() { f.Close() }, nil // closing releases the lock
		}
		if !errors.Is(err, errLocked) {
			f.Close()
			return nil, fmt.Errorf("localkube: lock %s: %w", path, err)
		}
		if !logged {
			log.Info("Waiting for another process to finish building the Kubernetes binaries", "lock", path)
			logged = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("localkube: waiting for %s: %w", path, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// goBuild builds each package of the module in dir to its output path: into
// a temporary directory beside them first, then renamed into place. Every
// progressEvery it logs how far it is: what, the time so far, the packages
// compiled and the latest.
func goBuild(ctx context.Context, log *slog.Logger, what, moduleDir, cacheDir, ldflags string, outputs map[string]string) error {
	tmp, err := os.MkdirTemp(cacheDir, ".build-")
	if err != nil {
		return fmt.Errorf("localkube: %w", err)
	}
	defer os.RemoveAll(tmp)

	goCmd, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("localkube: building the Kubernetes API server needs Go (the go command, in PATH): %w", err)
	}
	pkgs := slices.Sorted(maps.Keys(outputs))
	// -v names each package as it is compiled: the progress lines count them.
	args := []string{"build", "-v", "-trimpath", "-buildvcs=false", "-o", tmp + string(filepath.Separator)}
	if ldflags != "" {
		args = append(args, "-ldflags", ldflags)
	}
	args = append(args, pkgs...)
	cmd := exec.CommandContext(ctx, goCmd, args...)
	cmd.Dir = moduleDir
	// GOWORK=off: a go.work above the checkout must not pull the build
	// modules into a workspace with other versions of their dependencies.
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var out tailBuffer
	prog := newProgress(what, time.Now(), &out)
	cmd.Stdout, cmd.Stderr = prog, prog
	// Interrupt rather than kill, so that go stops its compilers too.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		prog.every(log, progressEvery, stop)
	}()
	err = cmd.Run()
	close(stop)
	<-stopped
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("localkube: go build in %s: %w", moduleDir, ctx.Err())
		}
		return fmt.Errorf("localkube: go build %s in %s: %w\n%s", strings.Join(pkgs, " "), moduleDir, err, out.String())
	}
	for _, pkg := range pkgs {
		// go build -o dir/ names each binary after its package's directory.
		name := filepath.Base(pkg)
		if pkg == "." {
			name = filepath.Base(moduleDir)
		}
		if err := os.Rename(filepath.Join(tmp, name), outputs[pkg]); err != nil {
			return fmt.Errorf("localkube: %w", err)
		}
	}
	return nil
}

// tailBuffer keeps the last 16 KiB written to it: enough for a compiler
// error or a crash, and bounded however much a child writes.
type tailBuffer struct{ b []byte }

const tailSize = 16 << 10

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > tailSize {
		t.b = t.b[len(t.b)-tailSize:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(t.b) }

var _ io.Writer = (*tailBuffer)(nil)
