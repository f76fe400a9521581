package helmtest

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// The Makefile installs the helm this package looks for.
func TestMakefileInstallsThisVersion(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^HELM_VERSION\s*=\s*(\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("the Makefile sets no HELM_VERSION")
	}
	if string(m[1]) != Version {
		t.Errorf("the Makefile installs helm %s, the tests look for %s", m[1], Version)
	}
	m = regexp.MustCompile(`(?m)^\$\(HELM\):\n\t.*helm\.sh/helm/v3/cmd/helm@\$\(HELM_VERSION\)`).FindSubmatch(b)
	if m == nil {
		t.Error("the Makefile's $(HELM) target doesn't go install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)")
	}
}

func TestObjects(t *testing.T) {
	objs, err := Objects("---\n# Source: a\napiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: a\n  namespace: ns1\n---\n# only a comment\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: b\n")
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 2 || objs[0].Kind() != "ServiceAccount" || objs[0].Name() != "a" || objs[0].Namespace() != "ns1" || objs[1].Kind() != "Namespace" || objs[1].Namespace() != "" {
		t.Errorf("got %v", objs)
	}
}
