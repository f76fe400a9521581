package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tetherhq/tether/internal/protocol"
	"github.com/tetherhq/tether/internal/version"
)

// CeilingUser is whom the agent impersonates to learn whether the API
// server enforces constrained impersonation: a GET /version as this user.
// The chart's strictMode lets the agent impersonate it (and get /version as
// a person) and gives it no rights; /version is open to everyone signed in.
const CeilingUser = "tether:ceiling-check"

// ceilingCheckTimeout bounds the two requests of one check.
const ceilingCheckTimeout = 10 * time.Second

// ceiling is what the agent tells the hub of the cluster owner's ceiling.
type ceiling struct {
	state string // protocol.CeilingOff, …Enforced or …Unavailable
	why   string // with …Unavailable, for people
}

// checkCeiling finds out, under strictMode, whether the API server enforces
// the ceiling (SPEC section 9). The agent's account has no plain
// impersonate verb then, so a server without constrained impersonation
// (Kubernetes before 1.36, or the ConstrainedImpersonation gate off)
// refuses every request the hub makes as a person. An access review can't
// tell: RBAC matches any verb by its text, so an older server says the
// account may "impersonate:user-info" all the same. A request does: GET
// /version impersonating CeilingUser passes only where the server
// understands the constrained verbs; then a review checks that the account
// lacks the plain verb, through which the request would pass as well
// (decision 027).
func (a *Agent) checkCeiling(ctx context.Context, sa ServiceAccount) ceiling {
	if !a.cfg.StrictMode {
		return ceiling{state: protocol.CeilingOff}
	}
	ctx, cancel := context.WithTimeout(ctx, ceilingCheckTimeout)
	defer cancel()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(sa.CACert)
	tr := &http.Transport{
		Proxy:               nil, // the API server is reached directly, as the relay does
		DialContext:         a.cfg.DialAPIServer,
		TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout: ceilingCheckTimeout,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	running, err := a.getVersion(ctx, client, sa.Token, "")
	if err != nil {
		return a.cantCheck(err)
	}
	_, err = a.getVersion(ctx, client, sa.Token, CeilingUser)
	var refused *apiError
	switch {
	case err == nil:
		// It passed, but it would with the plain verb too: no ceiling
		// holds while the account has it.
		plain, err := a.mayImpersonateAnyone(ctx, client, sa.Token)
		if err != nil {
			return a.cantCheck(err)
		}
		if plain {
			return unavailable("strictMode: the agent's ServiceAccount may impersonate anyone for anything (the plain impersonate verb on users), so no ceiling holds: remove that grant, and keep only what the chart's strictMode grants")
		}
		return ceiling{state: protocol.CeilingEnforced}
	case errors.As(err, &refused) && refused.status == http.StatusForbidden:
		if running.older(1, 36) {
			return unavailable(fmt.Sprintf("strictMode needs constrained impersonation, Kubernetes 1.36 or later; this cluster runs %s", running))
		}
		return unavailable(fmt.Sprintf("strictMode: this cluster (Kubernetes %s) refuses constrained impersonation, so it would refuse every request through Tether: turn its ConstrainedImpersonation feature gate on, or grant the agent's ServiceAccount what the chart's strictMode grants. The API server said: %s", running, refused.message))
	default:
		return a.cantCheck(err)
	}
}

// cantCheck is the ceiling when the check itself failed.
func (a *Agent) cantCheck(err error) ceiling {
	return unavailable(fmt.Sprintf("strictMode: the agent can't check that the API server enforces the ceiling (%v); it tries again every %d s", err, int(a.cfg.TokenReread.Seconds())))
}

func unavailable(why string) ceiling {
	if len(why) > protocol.MaxCeilingError {
		why = strings.ToValidUTF8(why[:protocol.MaxCeilingError-3], "") + "..."
	}
	return ceiling{state: protocol.CeilingUnavailable, why: why}
}

// kubeVersion is what GET /version says of the release.
type kubeVersion struct {
	Major string `json:"major"`
	Minor string `json:"minor"`
}

func (v kubeVersion) String() string {
	return leadingDigits(v.Major) + "." + leadingDigits(v.Minor)
}

// older reports whether v is a release before major.minor. Providers
// write minors like "33+": only the leading digits count. A version it
// can't read is not older: the message then quotes the API server.
func (v kubeVersion) older(major, minor int) bool {
	ma, err1 := strconv.Atoi(leadingDigits(v.Major))
	mi, err2 := strconv.Atoi(leadingDigits(v.Minor))
	if err1 != nil || err2 != nil {
		return false
	}
	return ma < major || ma == major && mi < minor
}

func leadingDigits(s string) string {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return s[:i]
}

// apiError is an answer other than 200 from the API server.
type apiError struct {
	status  int
	message string // the Status object's message, or the start of the body
}

func (e *apiError) Error() string {
	return fmt.Sprintf("the API server answered %d: %s", e.status, e.message)
}

// mayImpersonateAnyone asks the API server, with a SelfSubjectAccessReview,
// whether the agent's account has the plain impersonate verb on users.
func (a *Agent) mayImpersonateAnyone(ctx context.Context, client *http.Client, token string) (bool, error) {
	review := `{"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectAccessReview","spec":{"resourceAttributes":{"verb":"impersonate","resource":"users"}}}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+a.cfg.APIServer+"/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", strings.NewReader(review))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/json")
	body, err := a.do(client, req, token)
	if err != nil {
		return false, err
	}
	var answer struct {
		Status struct {
			Allowed bool `json:"allowed"`
		} `json:"status"`
	}
	if err := json.Unmarshal(body, &answer); err != nil {
		return false, fmt.Errorf("read the access review: %w", err)
	}
	return answer.Status.Allowed, nil
}

// getVersion GETs /version as the agent's account, impersonating as when
// it is set.
func (a *Agent) getVersion(ctx context.Context, client *http.Client, token, as string) (kubeVersion, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+a.cfg.APIServer+"/version", nil)
	if err != nil {
		return kubeVersion{}, err
	}
	if as != "" {
		req.Header.Set("Impersonate-User", as)
	}
	body, err := a.do(client, req, token)
	if err != nil {
		return kubeVersion{}, err
	}
	var v kubeVersion
	if err := json.Unmarshal(body, &v); err != nil {
		return kubeVersion{}, fmt.Errorf("read /version: %w", err)
	}
	return v, nil
}

// do sends req as the agent's account and returns the body of a 200
// answer; any other is an *apiError.
func (a *Agent) do(client *http.Client, req *http.Request, token string) ([]byte, error) {
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("User-Agent", "tether-agent/"+version.Version)
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, plainDialError(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", req.URL.Path, err)
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated {
		var status struct {
			Message string `json:"message"`
		}
		msg := strings.TrimSpace(string(body))
		if json.Unmarshal(body, &status) == nil && status.Message != "" {
			msg = status.Message
		}
		if len(msg) > 512 {
			msg = strings.ToValidUTF8(msg[:512], "") + "..."
		}
		return nil, &apiError{status: resp.StatusCode, message: msg}
	}
	return body, nil
}

// logCeiling logs the ceiling when it differs from the last one logged, so
// a reconnecting agent doesn't repeat itself.
func (a *Agent) logCeiling(c ceiling) {
	a.ceilingMu.Lock()
	defer a.ceilingMu.Unlock()
	if c == a.lastCeiling {
		return
	}
	a.lastCeiling = c
	switch c.state {
	case protocol.CeilingEnforced:
		a.log.Info("strictMode: the API server enforces the ceiling (constrained impersonation)")
	case protocol.CeilingUnavailable:
		a.log.Error(c.why)
	}
}

// recheckCeiling checks the ceiling again every reread interval, and ends
// the connection when it changed (the cluster was upgraded, its feature
// gate turned on, the agent's RBAC fixed or broken), so the next hello
// tells the hub.
func (c *conn) recheckCeiling(ctx context.Context, end func(result)) {
	t := time.NewTicker(c.a.cfg.TokenReread)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.mu.Lock()
		sa := ServiceAccount{Token: c.token, CACert: c.ca}
		c.mu.Unlock()
		now := c.a.checkCeiling(ctx, sa)
		if ctx.Err() != nil {
			return
		}
		if now.state != c.ceiling.state {
			c.a.logCeiling(now)
			end(result{err: fmt.Errorf("the ceiling is now %s, and the hub must know", now.state), wait: -1, goodbye: true})
			return
		}
	}
}
