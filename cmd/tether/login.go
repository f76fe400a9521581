package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"os/exec"
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
		Kubeconfig: *kubeconfig, Command: pluginCommand(), Cache: cache, Now: time.Now, Out: stdout})
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
	return login.Credential(ctx, login.CredentialOptions{Hub: *hub, Cache: cache, Now: time.Now, Out: stdout})
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
