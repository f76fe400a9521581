// Package helmtest runs the helm that `make helm` installs, against the
// chart in charts/tether, for the chart's tests (test/chart) and the
// end-to-end test that runs the agent with the chart's RBAC (test/e2e).
//
// helm is not built on demand: it is a fixed release, installed once into
// the user's cache directory by the Makefile target that `make test` runs
// first, so a missing helm fails the test and names that target rather than
// passing silently.
package helmtest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// Version is the helm release the tests run; the Makefile's HELM_VERSION
// must match it.
const Version = "v3.22.0"

// Path returns where `make helm` installs helm: helm-<Version>/helm under
// the user's cache directory's tether/, as the Makefile's CACHE_DIR says.
func Path() (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("helmtest: no cache directory: %w", err)
	}
	return filepath.Join(cache, "tether", "helm-"+Version, "helm"), nil
}

// Helm is a helm binary with its own empty configuration, so that what the
// user's ~/.config/helm holds (repositories, plugins) changes nothing.
type Helm struct {
	Bin   string
	Chart string // the chart's directory, charts/tether
	home  string
	// Kubeconfig, when set, is the cluster helm talks to (install
	// --dry-run=server); template and lint need none.
	Kubeconfig string
}

// New finds helm and the chart, and fails t, naming `make helm`, when helm
// is missing.
func New(t testing.TB) *Helm {
	t.Helper()
	bin, err := Path()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("helm %s is not installed at %s: run `make helm` (make test does it first)", Version, bin)
	}
	chart, err := chartDir()
	if err != nil {
		t.Fatal(err)
	}
	return &Helm{Bin: bin, Chart: chart, home: t.TempDir()}
}

// chartDir finds charts/tether in the source tree around the working
// directory, as tests run in their package's directory.
func chartDir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		c := filepath.Join(dir, "charts", "tether")
		if _, err := os.Stat(filepath.Join(c, "Chart.yaml")); err == nil {
			return c, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("helmtest: no charts/tether/Chart.yaml above the working directory")
		}
		dir = parent
	}
}

// Run runs helm with args and returns what it printed on standard output;
// the error includes standard error.
func (h *Helm) Run(args ...string) (string, error) {
	cmd := exec.Command(h.Bin, args...)
	cmd.Env = append(os.Environ(),
		"HELM_CONFIG_HOME="+filepath.Join(h.home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(h.home, "cache"),
		"HELM_DATA_HOME="+filepath.Join(h.home, "data"),
	)
	if h.Kubeconfig != "" {
		cmd.Env = append(cmd.Env, "KUBECONFIG="+h.Kubeconfig)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// ValuesFile writes values (YAML) to a file for helm's -f.
func ValuesFile(t testing.TB, values string) string {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "values-*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(values); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

// Template renders the chart as release in namespace with the values
// (YAML; "" for the defaults) and extra helm arguments.
func (h *Helm) Template(release, namespace, values string, extra ...string) (string, error) {
	args := []string{"template", release, h.Chart, "--namespace", namespace}
	if values != "" {
		f, err := os.CreateTemp(h.home, "values-*.yaml")
		if err != nil {
			return "", err
		}
		defer os.Remove(f.Name())
		_, err = f.WriteString(values)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return "", err
		}
		args = append(args, "-f", f.Name())
	}
	return h.Run(append(args, extra...)...)
}

// Object is one rendered manifest, decoded.
type Object map[string]any

// Kind, Name and Namespace read the object's identity.
func (o Object) Kind() string      { s, _ := o["kind"].(string); return s }
func (o Object) Name() string      { return o.meta("name") }
func (o Object) Namespace() string { return o.meta("namespace") }

func (o Object) meta(key string) string {
	m, _ := o["metadata"].(map[string]any)
	s, _ := m[key].(string)
	return s
}

// Objects splits a multi-document manifest and decodes each document,
// leaving out the empty ones.
func Objects(manifest string) ([]Object, error) {
	var out []Object
	for _, doc := range splitDocuments(manifest) {
		var o Object
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			return nil, fmt.Errorf("helmtest: a rendered document isn't YAML: %w\n%s", err, doc)
		}
		if len(o) > 0 {
			out = append(out, o)
		}
	}
	return out, nil
}

func splitDocuments(manifest string) []string {
	var docs []string
	var cur strings.Builder
	for line := range strings.Lines(manifest) {
		if strings.TrimRight(line, "\r\n") == "---" {
			docs = append(docs, cur.String())
			cur.Reset()
			continue
		}
		cur.WriteString(line)
	}
	return append(docs, cur.String())
}
