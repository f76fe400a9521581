package localkube

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// HTTPClient returns a client that trusts the cluster's CA and sends no
// credentials of its own. Close closes its idle connections.
func (c *Cluster) HTTPClient() *http.Client { return c.client }

// APIError is the API server's answer to a request that failed.
type APIError struct {
	Method, Path string
	StatusCode   int
	// Message is the message of the Status the API server sent, or the
	// start of its body.
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%s %s: %d %s: %s", e.Method, e.Path, e.StatusCode, http.StatusText(e.StatusCode), e.Message)
}

// Do sends a request as the admin: in (if not nil) as its JSON body, the
// JSON answer decoded into out (if not nil). An answer that isn't 2xx is an
// *APIError. This is enough for tests and `tether dev` to create the
// objects they need without client-go.
func (c *Cluster) Do(ctx context.Context, method, path string, in, out any) error {
	return c.do(ctx, c.AdminToken, method, path, in, out)
}

func (c *Cluster) do(ctx context.Context, token, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.URL+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
		if method == http.MethodPatch {
			req.Header.Set("Content-Type", "application/merge-patch+json")
		}
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		e := &APIError{Method: method, Path: path, StatusCode: resp.StatusCode}
		var status struct{ Message string }
		if json.Unmarshal(b, &status) == nil && status.Message != "" {
			e.Message = status.Message
		} else {
			e.Message = string(b[:min(len(b), 500)])
		}
		return e
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
	}
	return nil
}

// readyz returns nil once /readyz answers ok.
func (c *Cluster) readyz(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, "GET", c.URL+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(b)) != "ok" {
		return fmt.Errorf("/readyz: %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return nil
}

// setUpAgent creates what the Helm chart creates for the agent (namespace,
// ServiceAccount, the impersonation ClusterRole and its binding) and writes
// a token for the ServiceAccount as a pod would see it.
func (c *Cluster) setUpAgent(ctx context.Context) error {
	objects := []struct {
		path string
		obj  any
	}{
		{"/api/v1/namespaces", object("v1", "Namespace", "", Namespace)},
		{"/api/v1/namespaces/" + Namespace + "/serviceaccounts", object("v1", "ServiceAccount", Namespace, ServiceAccount)},
		{"/apis/rbac.authorization.k8s.io/v1/clusterroles", map[string]any{
			"apiVersion": "rbac.authorization.k8s.io/v1",
			"kind":       "ClusterRole",
			"metadata":   map[string]any{"name": ImpersonateRole},
			// Exactly what the hub needs: act as people and their
			// groups, and name its request id as their one extra.
			"rules": []map[string]any{
				{"apiGroups": []string{""}, "resources": []string{"users", "groups"}, "verbs": []string{"impersonate"}},
				{"apiGroups": []string{"authentication.k8s.io"}, "resources": []string{"userextras/tether-request-id"}, "verbs": []string{"impersonate"}},
			},
		}},
		{"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", map[string]any{
			"apiVersion": "rbac.authorization.k8s.io/v1",
			"kind":       "ClusterRoleBinding",
			"metadata":   map[string]any{"name": ImpersonateRole},
			"roleRef":    map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ImpersonateRole},
			"subjects":   []map[string]any{{"kind": "ServiceAccount", "name": ServiceAccount, "namespace": Namespace}},
		}},
	}
	for _, o := range objects {
		if err := c.Do(ctx, "POST", o.path, o.obj, nil); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(c.ServiceAccountDir, "ca.crt"), c.CAPEM, 0o644); err != nil {
		return err
	}
	_, err := c.RotateServiceAccountToken(ctx)
	return err
}

func object(apiVersion, kind, namespace, name string) map[string]any {
	meta := map[string]any{"name": name}
	if namespace != "" {
		meta["namespace"] = namespace
	}
	return map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": meta}
}

// NewServiceAccountToken asks the API server (TokenRequest) for a new token
// of the agent's ServiceAccount, valid for the cluster's Lifetime. Each call returns a
// different token, all of them valid at once, as when the kubelet renews a
// pod's token.
func (c *Cluster) NewServiceAccountToken(ctx context.Context) (string, error) {
	return c.tokenFor(ctx, Namespace, ServiceAccount)
}

// tokenFor asks the API server (TokenRequest) for a token of the service
// account namespace/name, valid for the cluster's Lifetime.
func (c *Cluster) tokenFor(ctx context.Context, namespace, name string) (string, error) {
	req := map[string]any{
		"apiVersion": "authentication.k8s.io/v1",
		"kind":       "TokenRequest",
		"spec":       map[string]any{"expirationSeconds": int64(Lifetime / time.Second)},
	}
	var resp struct {
		Status struct{ Token string }
	}
	path := "/api/v1/namespaces/" + namespace + "/serviceaccounts/" + name + "/token"
	if err := c.Do(ctx, "POST", path, req, &resp); err != nil {
		return "", err
	}
	if resp.Status.Token == "" {
		return "", errors.New("POST " + path + ": no token in the answer")
	}
	return resp.Status.Token, nil
}

// RotateServiceAccountToken gets a new token and replaces the `token` file
// in ServiceAccountDir with it, by renaming, so a reader never sees half a
// token; the kubelet swaps the file atomically too.
func (c *Cluster) RotateServiceAccountToken(ctx context.Context) (string, error) {
	token, err := c.NewServiceAccountToken(ctx)
	if err != nil {
		return "", err
	}
	tmp := filepath.Join(c.ServiceAccountDir, ".token.tmp")
	if err := os.WriteFile(tmp, []byte(token), 0o600); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, filepath.Join(c.ServiceAccountDir, "token")); err != nil {
		return "", err
	}
	return token, nil
}

// writeKubeconfig writes AdminKubeconfig.
func (c *Cluster) writeKubeconfig() error {
	// JSON is YAML, and saves quoting by hand.
	cfg := map[string]any{
		"apiVersion": "v1",
		"kind":       "Config",
		"clusters": []map[string]any{{"name": "localkube", "cluster": map[string]any{
			"server":                     c.URL,
			"certificate-authority-data": base64.StdEncoding.EncodeToString(c.CAPEM),
		}}},
		"users":           []map[string]any{{"name": "admin", "user": map[string]any{"token": c.AdminToken}}},
		"contexts":        []map[string]any{{"name": "localkube", "context": map[string]any{"cluster": "localkube", "user": "admin"}}},
		"current-context": "localkube",
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(c.AdminKubeconfig, b, 0o600)
}

// KubectlCommand returns a kubectl command for the given kubeconfig (one of
// the hub's, say). It ignores the user's ~/.kube/kuberc and keeps its
// discovery cache in the cluster's directory, so that what runs is the same
// on every machine and leaves nothing in $HOME.
func (c *Cluster) KubectlCommand(ctx context.Context, kubeconfig string, args ...string) *exec.Cmd {
	all := append([]string{"--kubeconfig=" + kubeconfig, "--cache-dir=" + filepath.Join(c.Dir, "kubectl-cache")}, args...)
	cmd := exec.CommandContext(ctx, c.Kubectl, all...)
	cmd.Env = append(os.Environ(), "KUBERC=off")
	return cmd
}

// RunKubectl runs kubectl with AdminKubeconfig (so as the admin, unless
// args say otherwise, like --token) and returns its standard output. When
// it fails, the error includes its standard error.
func (c *Cluster) RunKubectl(ctx context.Context, args ...string) ([]byte, error) {
	cmd := c.KubectlCommand(ctx, c.AdminKubeconfig, args...)
	var stderr tailBuffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("kubectl %s: %w: %s", strings.Join(redact(args), " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// redact hides the values of kubectl's --token flag, for errors.
func redact(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		switch {
		case strings.HasPrefix(a, "--token="):
			a = "--token=<redacted>"
		case i > 0 && args[i-1] == "--token":
			a = "<redacted>"
		}
		out[i] = a
	}
	return out
}
