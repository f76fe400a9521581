package login

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientauthv1 "k8s.io/client-go/pkg/apis/clientauthentication/v1"
)

const (
	// expiryMargin: a token expiring sooner than this is not handed out,
	// or kubectl's request could reach the hub after it expired.
	expiryMargin = 30 * time.Second
	// recheckWindow: asked again this soon after handing a token out,
	// `tether credential` asks the hub whether it still takes it, since
	// client-go runs the plugin again at once when a request is answered
	// 401 (decision 036).
	recheckWindow = 10 * time.Second
)

// LoginOptions are `tether login`'s.
type LoginOptions struct {
	Hub           string
	TokenFile     string
	ContextPrefix string // "" is the hub's Prefix
	CAFile        string
	Kubeconfig    string // "" is KubeconfigPath()
	Command       string // the tether binary the contexts run
	Cache         Cache
	Now           func() time.Time
	Out           io.Writer
	// Without a token file, the person signs in through the hub's page:
	// Interactive says how (decision 038).
	Interactive
}

// Interactive is how a person signs in without a token file.
type Interactive struct {
	// Device asks for the device sign-in (--device); NoDisplay says no
	// browser can open here (no DISPLAY or WAYLAND_DISPLAY on Linux), which
	// asks for it too.
	Device, NoDisplay bool
	// OpenBrowser opens an address in the person's browser.
	OpenBrowser func(url string) error
	// Msg is where the sign-in talks to the person: stderr, as kubectl
	// reads the credential from stdout.
	Msg io.Writer
}

// signIn signs the person in through the hub's page: in a browser, or
// with the device flow where none opens. It returns the sign-in's method.
func (in Interactive) signIn(ctx context.Context, client *hubClient) (signedIn, string, error) {
	if !in.Device && !in.NoDisplay && in.OpenBrowser != nil {
		got, err := signInBrowser(ctx, client, in.OpenBrowser, in.Msg)
		if !errors.Is(err, errNoBrowser) {
			return got, MethodBrowser, err
		}
		fmt.Fprintf(in.Msg, "The browser didn't open (%v): sign in with a code instead.\n", err)
	}
	got, err := signInDevice(ctx, client, in.Msg)
	return got, MethodDevice, err
}

// Login signs in to a hub, with a static token or through the hub's page,
// caches the token `tether credential` will hand kubectl, and writes a
// context for each cluster the person sees.
func Login(ctx context.Context, o LoginOptions) error {
	hub, err := CheckHub(o.Hub)
	if err != nil {
		return err
	}
	var tokenFile, static string
	if o.TokenFile != "" {
		if tokenFile, err = filepath.Abs(o.TokenFile); err != nil {
			return fmt.Errorf("login: %w", err)
		}
		if static, err = readToken(tokenFile); err != nil {
			return err
		}
	}
	var ca []byte
	if o.CAFile != "" {
		if ca, err = os.ReadFile(o.CAFile); err != nil {
			return fmt.Errorf("login: --ca-file: %w", err)
		}
	}
	client, err := newHubClient(hub, ca)
	if err != nil {
		return fmt.Errorf("login: --ca-file %s: %w", o.CAFile, err)
	}
	defer client.close()
	var cached *Cached
	var ex exchanged
	if tokenFile == "" {
		got, method, err := o.Interactive.signIn(ctx, client)
		if err != nil {
			return fmt.Errorf("login to %s: %w", hub, err)
		}
		cached = &Cached{Hub: hub, Method: method, Token: got.Token, Expires: got.Expiry, CA: ca}
		static = got.Token
		// Only for the CA the hub's kubeconfigs trust: its token is no
		// better than the one the sign-in got.
		if ex, err = client.exchange(ctx, got.Token); err != nil {
			return fmt.Errorf("login to %s: %w", hub, err)
		}
	}
	clusters, err := client.clusters(ctx, static)
	if err != nil {
		return fmt.Errorf("login to %s: %w", hub, err)
	}
	if tokenFile != "" {
		cached = &Cached{Hub: hub, Method: MethodTokenFile, TokenFile: tokenFile, CA: ca}
		if ex, err = signInTokenFile(ctx, client, cached); err != nil {
			return fmt.Errorf("login to %s: %w", hub, err)
		}
	}
	if err := o.Cache.Save(cached); err != nil {
		return err
	}
	if len(ca) == 0 {
		ca = ex.CA // the hub's own kubeconfigs trust it
	}
	names := Names{Prefix: o.ContextPrefix}
	if names.Prefix == "" {
		names.Prefix = Prefix(hub)
	}
	path := o.Kubeconfig
	if path == "" {
		path = KubeconfigPath()
	}
	if err := Merge(path, Entries{Hub: hub, Names: names, Clusters: clusters, CA: ca, Command: o.Command}); err != nil {
		return err
	}
	if len(clusters) == 0 {
		fmt.Fprintf(o.Out, "Signed in to %s, which shows you no clusters yet: run tether login again when it does.\n", hub)
		return nil
	}
	fmt.Fprintf(o.Out, "Signed in to %s. Contexts in %s:\n", hub, path)
	for _, c := range clusters {
		fmt.Fprintf(o.Out, "  %s\n", names.Context(c))
	}
	fmt.Fprintf(o.Out, "Try: kubectl --context %s get namespaces\n", names.Context(clusters[0]))
	return nil
}

// CheckHub checks a hub's URL and returns it without a trailing slash.
func CheckHub(hub string) (string, error) {
	u, err := url.Parse(hub)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("--hub %q must be the hub's URL, like https://tether.example.com", hub)
	}
	return strings.TrimSuffix(hub, "/"), nil
}

// readToken reads a static token from its file.
func readToken(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read token: %w", err)
	}
	token := strings.TrimSpace(string(data))
	if token == "" {
		return "", fmt.Errorf("read token: %s is empty", path)
	}
	return token, nil
}

// signInTokenFile reads cached's token file and sets cached's token: the
// hub-issued one it is exchanged for, or the static token itself where the
// hub issues none.
func signInTokenFile(ctx context.Context, client *hubClient, cached *Cached) (exchanged, error) {
	static, err := readToken(cached.TokenFile)
	if err != nil {
		return exchanged{}, err
	}
	ex, err := client.exchange(ctx, static)
	if errors.Is(err, ErrRefused) {
		return exchanged{}, fmt.Errorf("the hub refuses the token in %s: %w", cached.TokenFile, err)
	}
	if err != nil {
		return exchanged{}, err
	}
	cached.Token, cached.Expires = ex.Token, tokenExpiry(ex.Token)
	if ex.Token == "" {
		cached.Token, cached.Expires = static, time.Time{}
	}
	return ex, nil
}

// CredentialOptions are `tether credential`'s.
type CredentialOptions struct {
	Hub   string
	Cache Cache
	Now   func() time.Time
	Out   io.Writer
	// Interactive says kubectl lets the plugin talk to the person
	// (KUBERNETES_EXEC_INFO's spec.interactive): only then does a browser
	// or device sign-in run again.
	Interactive bool
	// SignIn is how it does.
	SignIn Interactive
}

// Credential prints the ExecCredential kubectl asks its exec plugin for:
// the cached token while it holds, or a new one signed in for.
func Credential(ctx context.Context, o CredentialOptions) error {
	hub, err := CheckHub(o.Hub)
	if err != nil {
		return err
	}
	cached, err := o.Cache.Load(hub)
	if errors.Is(err, ErrNotCached) {
		return fmt.Errorf("You're not signed in to %s: run tether login --hub %s", hub, hub)
	}
	if err != nil {
		return err
	}
	client, err := newHubClient(hub, cached.CA)
	if err != nil {
		return fmt.Errorf("credential: the cached CA: %w", err)
	}
	defer client.close()
	now := o.Now()
	if cached.Valid(now, expiryMargin) && !cached.Served.IsZero() && now.Sub(cached.Served) >= 0 && now.Sub(cached.Served) < recheckWindow {
		// Asked again at once: the hub likely refused the token. Ask it.
		// Any answer but a refusal (it is down, say) keeps the token.
		if _, err := client.clusters(ctx, cached.Token); errors.Is(err, ErrRefused) {
			cached.Token, cached.Expires = "", time.Time{}
			// Never handed out again, even if signing in fails below.
			if err := o.Cache.Save(cached); err != nil {
				return err
			}
		}
	}
	if !cached.Valid(now, expiryMargin) {
		switch cached.Method {
		case MethodTokenFile:
			if _, err := signInTokenFile(ctx, client, cached); err != nil {
				return fmt.Errorf("sign in to %s again: %w", hub, err)
			}
		case MethodBrowser, MethodDevice:
			if !o.Interactive {
				return fmt.Errorf("Your sign-in to %s has expired, and kubectl doesn't let tether credential ask you to sign in here: run tether login --hub %s", hub, hub)
			}
			in := o.SignIn
			in.Device = in.Device || cached.Method == MethodDevice
			got, method, err := in.signIn(ctx, client)
			if err != nil {
				return fmt.Errorf("sign in to %s again: %w", hub, err)
			}
			cached.Method, cached.Token, cached.Expires = method, got.Token, got.Expiry
		default:
			return fmt.Errorf("Your sign-in to %s has expired: run tether login --hub %s", hub, hub)
		}
	}
	// When it is handed out, not when this began: a slow sign-in must not
	// leave the window's start behind kubectl's 401.
	cached.Served = o.Now()
	if err := o.Cache.Save(cached); err != nil {
		return err
	}
	cred := clientauthv1.ExecCredential{
		TypeMeta: metav1.TypeMeta{APIVersion: execAPIVersion, Kind: "ExecCredential"},
		Status:   &clientauthv1.ExecCredentialStatus{Token: cached.Token},
	}
	if !cached.Expires.IsZero() {
		cred.Status.ExpirationTimestamp = &metav1.Time{Time: cached.Expires}
	}
	out, err := json.Marshal(cred)
	if err != nil {
		return fmt.Errorf("credential: %w", err)
	}
	_, err = fmt.Fprintf(o.Out, "%s\n", out)
	return err
}

// LogoutOptions are `tether logout`'s.
type LogoutOptions struct {
	Hub   string
	Cache Cache
	Now   func() time.Time
	Out   io.Writer
}

// Logout forgets the token cached for a hub. The token a static token was
// exchanged for is a kubeconfig's, which the hub has no way to revoke
// (only a page session's can be signed out of, POST /logout): it holds
// until it expires, or until the person leaves the users list.
func Logout(_ context.Context, o LogoutOptions) error {
	hub, err := CheckHub(o.Hub)
	if err != nil {
		return err
	}
	cached, err := o.Cache.Load(hub)
	if errors.Is(err, ErrNotCached) {
		fmt.Fprintf(o.Out, "You weren't signed in to %s.\n", hub)
		return nil
	}
	if err != nil {
		return err
	}
	if _, err := o.Cache.Remove(hub); err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "Signed out of %s: its cached token is removed, and kubectl will ask you to run tether login again.\n", hub)
	if !cached.Expires.IsZero() && cached.Expires.After(o.Now()) {
		fmt.Fprintf(o.Out, "The hub can't revoke that token: a copy of it would work until %s.\n", cached.Expires.UTC().Format(time.RFC3339))
	}
	return nil
}

// ExecInteractive reads KUBERNETES_EXEC_INFO, which kubectl sets for its
// exec plugin, and says whether the plugin may talk to the person
// (spec.interactive). Unset or unreadable, it may not.
func ExecInteractive(info string) bool {
	if info == "" {
		return false
	}
	var cred clientauthv1.ExecCredential
	if err := json.Unmarshal([]byte(info), &cred); err != nil {
		return false
	}
	return cred.Spec.Interactive
}
