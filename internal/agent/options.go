package agent

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"golang.org/x/net/http/httpproxy"

	"github.com/tetherhq/tether/internal/inventory"
	"github.com/tetherhq/tether/internal/logging"
	"github.com/tetherhq/tether/internal/protocol"
)

// DefaultServiceAccountDir is where Kubernetes mounts a pod's token.
const DefaultServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// Options are the agent's settings, as SPEC section 1 names them.
type Options struct {
	HubURL            *url.URL // http or https, base path included, no trailing slash
	Name              string
	Token             string // the agent's own token for the hub; never logged
	HealthAddr        string // "" when turned off
	TokenReread       time.Duration
	ServiceAccountDir string
	// TokenFile and CAFile, when set, are read instead of the token and
	// ca.crt in ServiceAccountDir: a hub's own agent for a cluster of
	// TETHER_FLEET_CLUSTERS has them where that list says.
	TokenFile, CAFile string
	APIServer         string // host:port
	HubCAFile         string // "" for the system roots
	// AllowedNamespaces limits the inventory to these namespaces, each
	// watched on its own (TETHER_ALLOWED_NAMESPACES); nil means all.
	AllowedNamespaces []string
	// GatewayTieBreaker is the Istio Gateway ("namespace/name") that wins
	// when several serve a host (TETHER_ISTIO_GATEWAY_TIE_BREAKER).
	GatewayTieBreaker string
	// StrictMode says the cluster owner's ceiling is on (TETHER_STRICT_MODE,
	// the chart's strictMode): the agent's account has constrained
	// impersonation only, and the agent checks at start that the API
	// server enforces it (SPEC section 9).
	StrictMode bool
	// InventoryOff is TETHER_INVENTORY=false: the agent watches nothing
	// and streams no inventory. Off rather than on, so that Options
	// built in code keep the inventory, as they always did.
	InventoryOff bool
	// ProxyOff is TETHER_PROXY=false: the agent refuses every person's
	// stream and carries only the hub's own probes and access reviews,
	// which the hub marks (relay). Off rather than on, as InventoryOff.
	ProxyOff bool
	// ExtraKinds are TETHER_INVENTORY_KINDS_EXTRA: kinds watched besides
	// the default ones, summarized generically.
	ExtraKinds []inventory.Kind
	// Proxy picks a proxy for the WebSocket to the hub (HTTPS_PROXY,
	// NO_PROXY; see ProxyFromEnv). Nil means none.
	Proxy func(*http.Request) (*url.URL, error)
}

// DefaultMemoryLimit is the Go runtime's soft memory limit for the agent
// when GOMEMLIMIT is unset. The agent's heap is mostly its inventory's
// summaries; without a limit the runtime lets garbage grow to as much
// again before it collects, and a 10,000-pod cluster's agent passed the
// chart's 128 MiB. With it, the agent collects sooner as it nears the
// limit (docs/decisions/028-the-agents-memory-limit.md).
const DefaultMemoryLimit = 72 << 20

// Getenv is os.Getenv's shape, so tests can hand in a map.
type Getenv func(string) string

// OptionsFromEnv reads and checks the agent's settings. Its errors are one
// line each, name the setting and say what it must be; none contains a token.
func OptionsFromEnv(getenv Getenv) (Options, error) {
	o := Options{
		Name:              orDefault(getenv("TETHER_AGENT_NAME"), "in-cluster"),
		Token:             strings.TrimSpace(getenv("TETHER_AGENT_TOKEN")),
		HealthAddr:        orDefault(getenv("TETHER_HEALTH_ADDR"), ":8081"),
		ServiceAccountDir: orDefault(getenv("TETHER_SERVICEACCOUNT_DIR"), DefaultServiceAccountDir),
		HubCAFile:         getenv("TETHER_HUB_CA"),
	}
	var err error
	if o.HubURL, err = ParseHubURL(getenv("TETHER_HUB_URL")); err != nil {
		return Options{}, err
	}
	if err := protocol.CheckName(o.Name); err != nil {
		return Options{}, fmt.Errorf("TETHER_AGENT_NAME must be the cluster's name in the hub's agents list: %w", err)
	}
	if o.Token == "" {
		return Options{}, errors.New("TETHER_AGENT_TOKEN must be set: the token the hub's agents list knows this agent by (tether token makes one)")
	}
	if strings.ContainsFunc(o.Token, unicode.IsControl) {
		// It goes in a header, which can't carry a line break.
		return Options{}, errors.New("TETHER_AGENT_TOKEN must be the token on one line: it holds a line break or another control character")
	}
	if o.HealthAddr == "0" {
		o.HealthAddr = ""
	} else if _, _, err := net.SplitHostPort(o.HealthAddr); err != nil {
		return Options{}, fmt.Errorf("TETHER_HEALTH_ADDR must be an address like :8081, or 0 to turn it off, not %q", o.HealthAddr)
	}
	reread, err := positiveSeconds("TETHER_TOKEN_REREAD_SECONDS", getenv("TETHER_TOKEN_REREAD_SECONDS"), 60)
	if err != nil {
		return Options{}, err
	}
	o.TokenReread = reread

	host := strings.TrimSpace(getenv("KUBERNETES_SERVICE_HOST"))
	if host == "" {
		return Options{}, errors.New("KUBERNETES_SERVICE_HOST must be set to the API server's address; Kubernetes sets it in every pod")
	}
	port := orDefault(strings.TrimSpace(getenv("KUBERNETES_SERVICE_PORT")), "443")
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return Options{}, fmt.Errorf("KUBERNETES_SERVICE_PORT must be a port number from 1 to 65535, not %q", port)
	}
	o.APIServer = net.JoinHostPort(host, port)
	if !protocol.ValidAPIServer(o.APIServer) {
		// With a good port, the host is what the hub would refuse in the
		// hello.
		return Options{}, fmt.Errorf("KUBERNETES_SERVICE_HOST must be a host name or IP address, not %q", host)
	}

	if o.HubCAFile != "" {
		if _, err := LoadCertPool(o.HubCAFile); err != nil {
			return Options{}, fmt.Errorf("TETHER_HUB_CA must be a PEM file of CA certificates: %w", err)
		}
	}
	if o.AllowedNamespaces, err = parseNamespaces(getenv("TETHER_ALLOWED_NAMESPACES")); err != nil {
		return Options{}, err
	}
	if o.GatewayTieBreaker, err = parseTieBreaker(getenv("TETHER_ISTIO_GATEWAY_TIE_BREAKER")); err != nil {
		return Options{}, err
	}
	switch v := strings.TrimSpace(getenv("TETHER_STRICT_MODE")); v {
	case "", "false":
	case "true":
		o.StrictMode = true
	default:
		return Options{}, fmt.Errorf("TETHER_STRICT_MODE must be true or false, not %q", v)
	}
	switch v := strings.TrimSpace(getenv("TETHER_INVENTORY")); v {
	case "", "true":
	case "false":
		o.InventoryOff = true
	default:
		return Options{}, fmt.Errorf("TETHER_INVENTORY must be true or false, not %q", v)
	}
	switch v := strings.TrimSpace(getenv("TETHER_PROXY")); v {
	case "", "true":
	case "false":
		o.ProxyOff = true
	default:
		return Options{}, fmt.Errorf("TETHER_PROXY must be true or false, not %q", v)
	}
	if o.ProxyOff && o.InventoryOff {
		return Options{}, errors.New("TETHER_PROXY and TETHER_INVENTORY are both false: the agent would do nothing; leave one of them on")
	}
	if o.ExtraKinds, err = inventory.ParseExtraKinds(getenv("TETHER_INVENTORY_KINDS_EXTRA")); errors.Is(err, inventory.ErrSecrets) {
		return Options{}, fmt.Errorf("TETHER_INVENTORY_KINDS_EXTRA (chart: inventory.extraKinds) names Secrets: %w; take them out of the list", err)
	} else if err != nil {
		return Options{}, fmt.Errorf("TETHER_INVENTORY_KINDS_EXTRA (chart: inventory.extraKinds) must be group/version/resource, separated by commas: %w", err)
	}
	o.Proxy = ProxyFromEnv(getenv)
	// Read the pod's credentials now, so a pod without them fails at once
	// with a message that says what is missing.
	if _, err := o.ReadServiceAccount(); err != nil {
		return Options{}, err
	}
	return o, nil
}

// ProxyFromEnv reads the proxy settings as Go's net/http reads them
// (https_proxy or HTTPS_PROXY, http_proxy or HTTP_PROXY for an http hub,
// no_proxy or NO_PROXY; none under CGI), from getenv rather than the process: settings are
// read where the command starts, and tests hand in a map. The returned func
// asks with the request's URL, as tunnel.Dial's upgrade request has it.
func ProxyFromEnv(getenv Getenv) func(*http.Request) (*url.URL, error) {
	// The lower-case name first, as httpproxy.FromEnvironment reads them.
	either := func(lower, upper string) string {
		if v := getenv(lower); v != "" {
			return v
		}
		return getenv(upper)
	}
	proxy := (&httpproxy.Config{
		HTTPProxy:  either("http_proxy", "HTTP_PROXY"),
		HTTPSProxy: either("https_proxy", "HTTPS_PROXY"),
		NoProxy:    either("no_proxy", "NO_PROXY"),
		CGI:        getenv("REQUEST_METHOD") != "",
	}).ProxyFunc()
	return func(r *http.Request) (*url.URL, error) { return proxy(r.URL) }
}

// ParseHubURL checks TETHER_HUB_URL: an http or https address with a host.
// The path is the hub's base path.
func ParseHubURL(raw string) (*url.URL, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return nil, errors.New("TETHER_HUB_URL must be set")
	}
	u, err := url.Parse(raw)
	raw = logging.RedactURL(raw) // the errors quote it, without its password
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.Hostname() == "" {
		return nil, fmt.Errorf("TETHER_HUB_URL must be the hub's address, like https://tether.example.com, not %q", raw)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("TETHER_HUB_URL must be the hub's address, with a port from 1 to 65535 if any, like https://tether.example.com:8443, not %q", raw)
		}
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" { // ForceQuery: a bare "?"
		return nil, fmt.Errorf("TETHER_HUB_URL must be the hub's address without a query or fragment, like https://tether.example.com/tether, not %q", raw)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	return u, nil
}

// ServiceAccount is what the pod's service account directory holds.
type ServiceAccount struct {
	Token  string
	CACert []byte // PEM, as read
}

// tokenPath and caPath are the files the agent reads its token and the API
// server's CA from.
func (o Options) tokenPath() string {
	return orDefault(o.TokenFile, filepath.Join(o.ServiceAccountDir, "token"))
}
func (o Options) caPath() string {
	return orDefault(o.CAFile, filepath.Join(o.ServiceAccountDir, "ca.crt"))
}

// ReadServiceAccount reads the token and ca.crt in the service account
// directory, or the files TokenFile and CAFile name.
func (o Options) ReadServiceAccount() (ServiceAccount, error) {
	tok, err := os.ReadFile(o.tokenPath())
	if err != nil || len(strings.TrimSpace(string(tok))) == 0 {
		if o.TokenFile != "" {
			return ServiceAccount{}, fmt.Errorf("No token in %s: Tether needs it to speak to the API server", o.TokenFile)
		}
		return ServiceAccount{}, fmt.Errorf("No service account token in %s: the agent needs its pod's token (automountServiceAccountToken)", o.ServiceAccountDir)
	}
	caPath := o.caPath()
	ca, err := os.ReadFile(caPath)
	if err != nil {
		if o.CAFile != "" {
			return ServiceAccount{}, fmt.Errorf("No CA certificate at %s: Tether needs it to check the API server (%v)", caPath, errors.Unwrap(err))
		}
		return ServiceAccount{}, fmt.Errorf("No CA certificate at %s: the agent needs its pod's ca.crt to check the API server (%v)", caPath, errors.Unwrap(err))
	}
	if !x509.NewCertPool().AppendCertsFromPEM(ca) {
		return ServiceAccount{}, fmt.Errorf("No CA certificate at %s: the file is empty or holds no PEM certificate", caPath)
	}
	return ServiceAccount{Token: strings.TrimSpace(string(tok)), CACert: ca}, nil
}

// LoadCertPool reads a PEM file of CA certificates.
func LoadCertPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}

// parseNamespaces reads TETHER_ALLOWED_NAMESPACES: namespace names,
// separated by commas, spaces around them ignored.
func parseNamespaces(v string) ([]string, error) {
	var out []string
	for _, ns := range strings.Split(v, ",") {
		ns = strings.TrimSpace(ns)
		if ns == "" {
			continue
		}
		if protocol.CheckName(ns) != nil {
			return nil, fmt.Errorf("TETHER_ALLOWED_NAMESPACES must be namespace names separated by commas, like team-a,team-b; %q is not a namespace name", ns)
		}
		if !slices.Contains(out, ns) {
			out = append(out, ns)
		}
	}
	return out, nil
}

// parseTieBreaker reads TETHER_ISTIO_GATEWAY_TIE_BREAKER: namespace/name.
func parseTieBreaker(v string) (string, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return "", nil
	}
	ns, name, ok := strings.Cut(v, "/")
	if !ok || protocol.CheckName(ns) != nil || name == "" || strings.ContainsAny(name, "/ ") {
		return "", fmt.Errorf("TETHER_ISTIO_GATEWAY_TIE_BREAKER must name an Istio Gateway as namespace/name, like istio-system/public, not %q", v)
	}
	return v, nil
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// maxSeconds bounds a setting in seconds: a year.
const maxSeconds = 365 * 24 * 60 * 60

func positiveSeconds(name, v string, def int) (time.Duration, error) {
	if strings.TrimSpace(v) == "" {
		return time.Duration(def) * time.Second, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%s must be a whole number of seconds, at least 1, not %q", name, v)
	}
	if n > maxSeconds {
		// More would overflow a time.Duration into a negative one.
		return 0, fmt.Errorf("%s must be at most %d seconds (a year), not %q", name, maxSeconds, v)
	}
	return time.Duration(n) * time.Second, nil
}
