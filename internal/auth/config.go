package auth

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"
)

// The settings this package reads, as SPEC section 3 names them.
const (
	SettingUsers              = "TETHER_USERS"
	SettingUsersFile          = "TETHER_USERS_FILE"
	SettingOIDCIssuer         = "TETHER_OIDC_ISSUER"
	SettingOIDCClientID       = "TETHER_OIDC_CLIENT_ID"
	SettingOIDCUsernameClaim  = "TETHER_OIDC_USERNAME_CLAIM"
	SettingOIDCGroupsClaim    = "TETHER_OIDC_GROUPS_CLAIM"
	SettingOIDCCAFile         = "TETHER_OIDC_CA_FILE"
	SettingSigningKeyFile     = "TETHER_TOKEN_SIGNING_KEY_FILE"
	SettingKubeconfigTTL      = "TETHER_KUBECONFIG_TTL"
	SettingProxyUserHeader    = "TETHER_AUTH_PROXY_USER_HEADER"
	SettingProxyGroupsHeader  = "TETHER_AUTH_PROXY_GROUPS_HEADER"
	SettingProxyTrustedCIDRs  = "TETHER_AUTH_PROXY_TRUSTED_CIDRS"
	SettingUserPrefix         = "TETHER_IMPERSONATE_USER_PREFIX"
	SettingGroupPrefix        = "TETHER_IMPERSONATE_GROUP_PREFIX"
	settingPublicURL          = "TETHER_PUBLIC_URL"
	defaultOIDCUsernameClaim  = "email"
	defaultOIDCGroupsClaim    = "groups"
	defaultKubeconfigTTL      = 12 * time.Hour
	minKubeconfigTTL          = time.Minute
	defaultOIDCRetryMax       = time.Minute
	defaultOIDCRequestTimeout = 10 * time.Second
)

// ErrNothingConfigured is what a hub started with no way for people to sign in says: it needs
// a users list, an OIDC issuer or an auth proxy. Hub-issued tokens don't count, as only someone
// signed in some other way can get one. `tether dev` starts anyway.
var ErrNothingConfigured = errors.New("no way for people to sign in is configured: set TETHER_USERS or TETHER_USERS_FILE, TETHER_OIDC_ISSUER with TETHER_OIDC_CLIENT_ID, or TETHER_AUTH_PROXY_USER_HEADER with TETHER_AUTH_PROXY_TRUSTED_CIDRS")

// Config is what New needs. OptionsFromEnv fills it from the settings; nothing else here reads
// the environment. Zero values are documented per field; a Config with nothing set is valid
// but lets no one in (Configured reports false).
type Config struct {
	// Users is TETHER_USERS (the users list inline, YAML or its base64), UsersFile
	// TETHER_USERS_FILE (a path, reloaded when it changes). At most one may be set.
	Users, UsersFile string

	OIDC OIDCConfig

	// HubURL is the hub's address as people open it (TETHER_PUBLIC_URL): hub-issued tokens are
	// meant for it (their aud), so a token from one hub doesn't work at another sharing its
	// key. "" means "tether-hub", for `tether dev` and tests.
	HubURL string
	// SigningKeyFile is TETHER_TOKEN_SIGNING_KEY_FILE: a PEM file of one or more Ed25519
	// private keys (PKCS #8, as openssl genpkey -algorithm ed25519 writes). The first signs;
	// all are accepted, so a key can be rotated by putting the new one first and removing the
	// old one a TTL later. "" makes a key at start that lives as long as the process.
	SigningKeyFile string
	// TTL is how long a hub-issued token is valid (TETHER_KUBECONFIG_TTL); zero means 12h.
	TTL time.Duration
	// HubTokenLeeway is how long past its expiry a hub-issued token is still taken, for hub
	// replicas sharing a signing key whose clocks may disagree (TETHER_COORDINATION=kubernetes,
	// issue 11). Zero, the default, is right for a single hub, which signs and checks its tokens
	// on one clock; at most 5s. OIDC ID tokens keep their own leeway.
	HubTokenLeeway time.Duration

	// ProxyUserHeader and ProxyGroupsHeader are TETHER_AUTH_PROXY_USER_HEADER and
	// TETHER_AUTH_PROXY_GROUPS_HEADER; "" turns the auth proxy off (the groups header is
	// optional). ProxyTrusted are TETHER_AUTH_PROXY_TRUSTED_CIDRS: the TCP peers whose headers
	// count. A bare address is a prefix of one address.
	ProxyUserHeader, ProxyGroupsHeader string
	ProxyTrusted                       []netip.Prefix

	// UserPrefix and GroupPrefix (TETHER_IMPERSONATE_USER_PREFIX, …_GROUP_PREFIX) go before
	// the name and each group the hub impersonates.
	UserPrefix, GroupPrefix string

	// Logger gets reloads of the users list, the state of the OIDC issuer and the warning about
	// a signing key made at start. Nil discards them.
	Logger *slog.Logger
	// Now is the clock for token expiry and retry delays; nil means time.Now.
	Now func() time.Time
	// Debounce and PollInterval tune how the users file is watched, as in listfile.WatchOptions.
	Debounce, PollInterval time.Duration
}

// OIDCConfig is the OIDC issuer whose ID tokens the hub takes as bearer tokens. An empty Issuer
// turns OIDC off.
type OIDCConfig struct {
	Issuer   string // TETHER_OIDC_ISSUER: an https URL, exactly as the issuer names itself
	ClientID string // TETHER_OIDC_CLIENT_ID: tokens must have it in their aud
	// UsernameClaim names the claim that is the person's name; "" means "email", which counts
	// only with "email_verified": true.
	UsernameClaim string
	// GroupsClaim names the claim with the person's groups, text or a list of texts; "" means
	// "groups". A token without it has no groups.
	GroupsClaim string
	// CAFile is a PEM file of the CAs to trust for the issuer's TLS instead of the system's.
	CAFile string
	// RetryMax caps the delay between discovery attempts while the issuer can't be reached;
	// zero means a minute. The first retry waits a second, each next one twice as long.
	RetryMax time.Duration
	// RequestTimeout bounds each request to the issuer (discovery, keys); zero means 10 s.
	RequestTimeout time.Duration
}

// OptionsFromEnv reads and checks the authentication settings. Each error is one line that
// names the setting and says what it must be; none contains a token. It reads no files: New
// does, and its errors name the setting too.
func OptionsFromEnv(getenv func(string) string) (Config, error) {
	get := func(name string) string { return strings.TrimSpace(getenv(name)) }
	c := Config{
		Users:     getenv(SettingUsers),
		UsersFile: get(SettingUsersFile),
		OIDC: OIDCConfig{
			Issuer:        get(SettingOIDCIssuer),
			ClientID:      get(SettingOIDCClientID),
			UsernameClaim: get(SettingOIDCUsernameClaim),
			GroupsClaim:   get(SettingOIDCGroupsClaim),
			CAFile:        get(SettingOIDCCAFile),
		},
		HubURL:            strings.TrimRight(get(settingPublicURL), "/"),
		SigningKeyFile:    get(SettingSigningKeyFile),
		ProxyUserHeader:   get(SettingProxyUserHeader),
		ProxyGroupsHeader: get(SettingProxyGroupsHeader),
		UserPrefix:        getenv(SettingUserPrefix),
		GroupPrefix:       getenv(SettingGroupPrefix),
	}
	if c.OIDC.Issuer == "" {
		for _, s := range []string{SettingOIDCClientID, SettingOIDCUsernameClaim, SettingOIDCGroupsClaim, SettingOIDCCAFile} {
			if get(s) != "" {
				return Config{}, fmt.Errorf("%s is set but %s isn't: set the issuer's URL too, or unset %s", s, SettingOIDCIssuer, s)
			}
		}
	}
	if v := get(SettingKubeconfigTTL); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < minKubeconfigTTL {
			return Config{}, fmt.Errorf("%s must be a duration like 12h or 30m, at least 1m, not %q", SettingKubeconfigTTL, v)
		}
		c.TTL = d
	}
	if v := get(SettingProxyTrustedCIDRs); v != "" {
		for _, s := range strings.Split(v, ",") {
			s = strings.TrimSpace(s)
			if s == "" {
				continue
			}
			p, err := parsePrefix(s)
			if err != nil {
				return Config{}, fmt.Errorf("%s must be comma-separated CIDRs like 10.0.0.0/8 or fd00::/8; %q is not one", SettingProxyTrustedCIDRs, s)
			}
			c.ProxyTrusted = append(c.ProxyTrusted, p)
		}
		if c.ProxyUserHeader == "" {
			return Config{}, fmt.Errorf("%s is set but %s isn't: name the header the proxy puts the user's name in, or unset %s", SettingProxyTrustedCIDRs, SettingProxyUserHeader, SettingProxyTrustedCIDRs)
		}
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// parsePrefix reads a CIDR, or a bare address as the prefix of that one address.
func parsePrefix(s string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return netip.Prefix{}, errors.New("not an address")
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	if p.Addr().Is4In6() {
		// ::ffff:10.0.0.0/104 means 10.0.0.0/8; peers are compared unmapped.
		if p.Bits() < 96 {
			return netip.Prefix{}, errors.New("mapped prefix shorter than 96 bits")
		}
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p.Masked(), nil
}

// Validate checks a Config as OptionsFromEnv would, so one built by hand gets the same errors.
// It reads no files.
func (c Config) Validate() error {
	if strings.TrimSpace(c.Users) != "" && strings.TrimSpace(c.UsersFile) != "" {
		return fmt.Errorf("%s and %s are both set; set only one of them.", SettingUsers, SettingUsersFile)
	}
	if o := c.OIDC; o.Issuer != "" {
		u, err := url.Parse(o.Issuer)
		if err != nil || u.Scheme != "https" || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			return fmt.Errorf("%s must be the issuer's https URL, exactly as it names itself (the \"iss\" of its tokens), like https://accounts.example.com, not %q", SettingOIDCIssuer, o.Issuer)
		}
		if o.ClientID == "" {
			return fmt.Errorf("%s must be set with %s: the hub takes only ID tokens meant for this client (their \"aud\")", SettingOIDCClientID, SettingOIDCIssuer)
		}
		for _, cl := range []struct{ setting, v string }{{SettingOIDCUsernameClaim, o.UsernameClaim}, {SettingOIDCGroupsClaim, o.GroupsClaim}} {
			if strings.ContainsFunc(cl.v, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
				return fmt.Errorf("%s must be the name of a claim, like email or groups, not %q", cl.setting, cl.v)
			}
		}
	}
	if c.TTL != 0 && c.TTL < minKubeconfigTTL {
		return fmt.Errorf("%s must be a duration like 12h or 30m, at least 1m, not %q", SettingKubeconfigTTL, c.TTL)
	}
	if c.HubTokenLeeway < 0 || c.HubTokenLeeway > maxHubLeeway {
		return fmt.Errorf("the leeway for hub-issued tokens must be between 0 and %s (for hub replicas whose clocks disagree by a few seconds), not %s", maxHubLeeway, c.HubTokenLeeway)
	}
	if err := c.validateProxy(); err != nil {
		return err
	}
	for _, p := range []struct{ setting, v string }{{SettingUserPrefix, c.UserPrefix}, {SettingGroupPrefix, c.GroupPrefix}} {
		if p.v == "" {
			continue
		}
		if err := checkText(p.v); err != nil || strings.HasPrefix(p.v, "system:") {
			return fmt.Errorf("%s must be text without control characters or spaces at either end, not starting with \"system:\" (Kubernetes keeps those names for itself), like \"tether:\"; it is %q", p.setting, p.v)
		}
	}
	return nil
}

func (c Config) validateProxy() error {
	if c.ProxyUserHeader == "" {
		if c.ProxyGroupsHeader != "" {
			return fmt.Errorf("%s is set but %s isn't: name the header the proxy puts the user's name in, or unset %s", SettingProxyGroupsHeader, SettingProxyUserHeader, SettingProxyGroupsHeader)
		}
		return nil
	}
	for _, h := range []struct{ setting, v string }{{SettingProxyUserHeader, c.ProxyUserHeader}, {SettingProxyGroupsHeader, c.ProxyGroupsHeader}} {
		if h.v == "" {
			continue
		}
		if !validHeaderName(h.v) {
			return fmt.Errorf("%s must be a header name like X-Remote-User, not %q", h.setting, h.v)
		}
		if reservedHeader(h.v) {
			return fmt.Errorf("%s can't be %q: the hub and Kubernetes use that header themselves; choose the header your proxy sets, like X-Remote-User", h.setting, h.v)
		}
	}
	if strings.EqualFold(c.ProxyUserHeader, c.ProxyGroupsHeader) {
		return fmt.Errorf("%s and %s must be different headers; both are %q", SettingProxyUserHeader, SettingProxyGroupsHeader, c.ProxyUserHeader)
	}
	if len(c.ProxyTrusted) == 0 {
		return fmt.Errorf("%s must be set with %s: the addresses of the proxy, like 10.0.0.0/8, as only it may say who a request is from", SettingProxyTrustedCIDRs, SettingProxyUserHeader)
	}
	for _, p := range c.ProxyTrusted {
		if p.Bits() == 0 {
			return fmt.Errorf("%s must not contain %q: it would trust every address, so anyone could claim to be anyone; give the proxy's addresses", SettingProxyTrustedCIDRs, p)
		}
	}
	return nil
}

// validHeaderName reports whether s is an HTTP field name (RFC 9110 token characters).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// reservedHeader reports whether a header is one the hub or Kubernetes gives a meaning of its
// own, so that naming it for the proxy is surely a mistake.
func reservedHeader(name string) bool {
	name = http.CanonicalHeaderKey(name)
	switch name {
	case "Authorization", "Proxy-Authorization", "Cookie", "Host", "Connection", "Upgrade",
		"Content-Length", "Content-Type", "Transfer-Encoding", "Te", "Trailer", "Keep-Alive",
		"Origin", "X-Forwarded-For":
		return true
	}
	return strings.HasPrefix(name, "Impersonate-") || strings.HasPrefix(name, "Sec-Websocket-")
}

// Configured reports whether any way for people to sign in is set: a users list, an OIDC
// issuer or an auth proxy. Without one the hub refuses to start (ErrNothingConfigured), except
// under `tether dev`.
func (c Config) Configured() bool {
	return strings.TrimSpace(c.Users) != "" || c.UsersFile != "" || c.OIDC.Issuer != "" || c.ProxyUserHeader != ""
}

// Impersonated returns the name and groups the hub impersonates for p: its own, with
// UserPrefix and GroupPrefix in front. Check them with CheckIdentity before use.
func (c Config) Impersonated(p Person) (user string, groups []string) {
	groups = make([]string, len(p.Groups))
	for i, g := range p.Groups {
		groups[i] = c.GroupPrefix + g
	}
	return c.UserPrefix + p.Name, groups
}

func (c Config) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}
