package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"os/exec"
	"runtime"
	"time"

	"github.com/tetherhq/tether/internal/login"
)

func runLogin(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tether login", flag.ContinueOnError)
	fs.SetOutput(stderr)
	hub := fs.String("hub", "", "the hub's URL, like https://tether.example.com")
	tokenFile := fs.String("token-file", "", "a file holding your static token (the users list's)")
	prefix := fs.String("context-prefix", "", "what the contexts' names start with, before /<cluster> (default the hub's host)")
	caFile := fs.String("ca-file", "", "a PEM file of the CA the hub's certificate chains to, if the system doesn't trust it")
	kubeconfig := fs.String("kubeconfig", "", "the kubeconfig to write (default the first file of $KUBECONFIG, or ~/.kube/config)")
	device := fs.Bool("device", false, "sign in with a code shown here, approved on the hub's page from any browser (where no browser opens here)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *hub == "" {
		return errors.New("tether login needs --hub, the hub's URL")
	}
	cache, err := login.UserCache()
	if err != nil {
		return err
	}
	return login.Login(ctx, login.LoginOptions{Hub: *hub, TokenFile: *tokenFile, ContextPrefix: *prefix, CAFile: *caFile,
		Kubeconfig: *kubeconfig, Command: pluginCommand(), Cache: cache, Now: time.Now, Out: stdout,
		Interactive: interactive(*device, stderr)})
}

func runCredential(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tether credential", flag.ContinueOnError)
	fs.SetOutput(stderr)
	hub := fs.String("hub", "", "the hub's URL, as tether login wrote it")
	if err := parse(fs, args); err != nil {
		return err
	}
	cache, err := login.UserCache()
	if err != nil {
		return err
	}
	return login.Credential(ctx, login.CredentialOptions{Hub: *hub, Cache: cache, Now: time.Now, Out: stdout,
		Interactive: login.ExecInteractive(os.Getenv("KUBERNETES_EXEC_INFO")), SignIn: interactive(false, stderr)})
}

func runLogout(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tether logout", flag.ContinueOnError)
	fs.SetOutput(stderr)
	hub := fs.String("hub", "", "the hub's URL")
	if err := parse(fs, args); err != nil {
		return err
	}
	cache, err := login.UserCache()
	if err != nil {
		return err
	}
	return login.Logout(ctx, login.LogoutOptions{Hub: *hub, Cache: cache, Now: time.Now, Out: stdout})
}

// pluginCommand is the command the contexts run for a credential: "tether"
// where that is this binary on $PATH, so an upgrade in place keeps working,
// and this binary's path otherwise.
func pluginCommand() string {
	self, err := os.Executable()
	if err != nil {
		return "tether"
	}
	if onPath, err := exec.LookPath("tether"); err == nil {
		a, errA := os.Stat(self)
		b, errB := os.Stat(onPath)
		if errA == nil && errB == nil && os.SameFile(a, b) {
			return "tether"
		}
	}
	return self
}

// interactive is how a person signs in without a token file: in the
// browser $BROWSER names or the desktop's (xdg-open, open), and with the
// device flow where no display is set.
func interactive(device bool, stderr io.Writer) login.Interactive {
	noDisplay := runtime.GOOS != "darwin" && runtime.GOOS != "windows" &&
		os.Getenv("DISPLAY") == "" && os.Getenv("WAYLAND_DISPLAY") == ""
	browser := os.Getenv("BROWSER")
	return login.Interactive{Device: device, NoDisplay: noDisplay && browser == "", Msg: stderr,
		OpenBrowser: func(url string) error { return openBrowser(browser, url) }}
}

// openBrowser starts a browser on url and doesn't wait for it.
func openBrowser(browser, url string) error {
	var cmd *exec.Cmd
	switch {
	case browser != "":
		cmd = exec.Command(browser, url)
	case runtime.GOOS == "darwin":
		cmd = exec.Command("open", url)
	case runtime.GOOS == "windows":
		cmd = exec.Command("rundll32", "url.dll,FileProtocolHandler", url)
	default:
		cmd = exec.Command("xdg-open", url)
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	go cmd.Wait()
	return nil
}
