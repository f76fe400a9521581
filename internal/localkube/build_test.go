package localkube

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestKubernetesVersion(t *testing.T) {
	for _, tc := range []struct{ name, gomod, want string }{
		{"one line", "module x\n\nrequire k8s.io/kubernetes v1.36.3\n", "v1.36.3"},
		{"block", "module x\nrequire (\n\tk8s.io/api v0.36.3\n\tk8s.io/kubernetes v1.36.3 // indirect\n)\n", "v1.36.3"},
		{"replace only", "module x\nreplace k8s.io/api => k8s.io/api v0.36.3\n", ""},
		{"placeholder", "module x\nrequire k8s.io/kubernetes v0.0.0\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "go.mod")
			os.WriteFile(path, []byte(tc.gomod), 0o644)
			got, err := kubernetesVersion(path)
			if got != tc.want || (err != nil) != (tc.want == "") {
				t.Errorf("kubernetesVersion = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestVersionLDFlags(t *testing.T) {
	got := versionLDFlags("v1.36.3")
	for _, want := range []string{
		"-X k8s.io/component-base/version.gitVersion=v1.36.3",
		"-X k8s.io/component-base/version.gitMajor=1",
		"-X k8s.io/component-base/version.gitMinor=36",
		"-X k8s.io/client-go/pkg/version.gitVersion=v1.36.3",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("versionLDFlags lacks %q: %s", want, got)
		}
	}
}

func TestHashModulesChangesWithFiles(t *testing.T) {
	src := t.TempDir()
	write := func(rel, text string) {
		path := filepath.Join(src, rel)
		os.MkdirAll(filepath.Dir(path), 0o755)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("test/kube/go.mod", "module a\n")
	write("test/kube/cmd/x/main.go", "package main\n")
	write("test/etcd/go.mod", "module b\n")
	h1, err := hashModules(src, kubeModule, etcdModule)
	if err != nil {
		t.Fatal(err)
	}
	write("test/kube/README", "not part of the build\n")
	if h, _ := hashModules(src, kubeModule, etcdModule); h != h1 {
		t.Errorf("a file that isn't built changed the hash")
	}
	write("test/kube/cmd/x/main.go", "package main // edited\n")
	if h, _ := hashModules(src, kubeModule, etcdModule); h == h1 || len(h) != 12 {
		t.Errorf("editing a main gave hash %q, was %q", h, h1)
	}
}

func TestFindSource(t *testing.T) {
	// The tests run in internal/localkube, inside the source tree.
	src, err := findSource("")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(src, kubeModule, "go.mod")); err != nil {
		t.Errorf("findSource = %q: %v", src, err)
	}
	if _, err := findSource(t.TempDir()); err == nil {
		t.Error("findSource accepted an empty directory")
	}
}
