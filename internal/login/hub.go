package login

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

// maxHubAnswer bounds what is read of the hub's answers: a kubeconfig for
// thousands of clusters is a few MiB.
const maxHubAnswer = 16 << 20

// ErrRefused says the hub answered 401: it doesn't take the token.
var ErrRefused = errors.New("the hub refused the token")

// hubClient asks one hub for what login and credential need.
type hubClient struct {
	url  string // without a trailing slash
	http *http.Client
}

// newHubClient talks to hubURL, trusting caPEM as well as the system's
// roots when it is set.
func newHubClient(hubURL string, caPEM []byte) (*hubClient, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if len(caPEM) > 0 {
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(caPEM) {
			return nil, errors.New("the CA file holds no PEM certificate")
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &hubClient{url: strings.TrimSuffix(hubURL, "/"), http: &http.Client{Transport: tr, Timeout: 30 * time.Second}}, nil
}

// close drops the client's idle connections: the command is done with the hub.
func (h *hubClient) close() { h.http.CloseIdleConnections() }

// get asks for path with token, and returns the body of a 200 answer.
// A 401 is ErrRefused, with what the hub said.
func (h *hubClient) get(ctx context.Context, path, token string) ([]byte, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.url+path, nil)
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := h.http.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxHubAnswer))
	if err != nil {
		return nil, resp.StatusCode, err
	}
	switch {
	case resp.StatusCode == http.StatusOK:
		return body, resp.StatusCode, nil
	case resp.StatusCode == http.StatusUnauthorized:
		return nil, resp.StatusCode, fmt.Errorf("%w: %s", ErrRefused, firstLine(body))
	default:
		return nil, resp.StatusCode, fmt.Errorf("%s answered %d: %s", path, resp.StatusCode, firstLine(body))
	}
}

// clusters lists the names of the clusters token's person sees
// (GET /api/clusters).
func (h *hubClient) clusters(ctx context.Context, token string) ([]string, error) {
	body, _, err := h.get(ctx, "/api/clusters", token)
	if err != nil {
		return nil, fmt.Errorf("list clusters: %w", err)
	}
	var list []struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("list clusters: the hub's answer isn't its cluster list: %w", err)
	}
	names := make([]string, 0, len(list))
	for _, c := range list {
		names = append(names, c.Name)
	}
	return names, nil
}

// exchanged is what the hub's kubeconfig gives for a token.
type exchanged struct {
	// Token is the hub-issued token, or "" where the hub issues none.
	Token string
	// CA is the CA the hub's kubeconfigs trust, if they carry one.
	CA []byte
}

// exchange trades token for a hub-issued one: the token of the kubeconfig
// the hub issues the person (GET /api/kubeconfig, SPEC section 3). A hub
// without that endpoint (404) gives none.
func (h *hubClient) exchange(ctx context.Context, token string) (exchanged, error) {
	body, code, err := h.get(ctx, "/api/kubeconfig", token)
	if code == http.StatusNotFound {
		return exchanged{}, nil
	}
	if err != nil {
		return exchanged{}, fmt.Errorf("exchange token: %w", err)
	}
	cfg, err := clientcmd.Load(body)
	if err != nil {
		return exchanged{}, fmt.Errorf("exchange token: the hub's kubeconfig can't be read: %w", err)
	}
	var out exchanged
	for _, u := range cfg.AuthInfos {
		if u.Token != "" {
			out.Token = u.Token
			break
		}
	}
	if out.Token == "" {
		return exchanged{}, errors.New("exchange token: the hub's kubeconfig holds no token")
	}
	for _, c := range cfg.Clusters {
		if len(c.CertificateAuthorityData) > 0 {
			out.CA = c.CertificateAuthorityData
			break
		}
	}
	return out, nil
}

// firstLine is the start of what the hub said, for an error message.
func firstLine(body []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
