// Command tether is Tether's one binary: the hub, the agent, and the tools
// around them. It only reads settings and calls into internal packages.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `Tether reaches private Kubernetes clusters from one hub.

Usage:
  tether hub                run the hub
  tether agent              run the agent in a cluster
  tether dev [--addr A]     run a local API server, a hub and an agent on this machine
  tether token [--name N]   make a new agent token and its agents-list entry
  tether token --person P [--groups G,H]
                            make a person's token and its users-list entry
  tether version            print the version
  tether login --hub URL [--token-file F | --device]
                            write kubectl contexts for the hub's clusters
  tether credential --hub URL
                            kubectl's credential plugin (tether login sets it)
  tether logout --hub URL   forget the hub's cached token

The hub and the agent take their settings from TETHER_… environment
variables; docs/SETTINGS.md lists each, with its default.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	if len(args) == 2 && (args[0] == "hub" || args[0] == "agent") && isHelp(args[1]) {
		fmt.Fprint(stdout, usage)
		return 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch args[0] {
	case "hub":
		err = runHub(ctx, args[1:], stderr)
	case "agent":
		err = runAgent(ctx, args[1:], stderr)
	case "dev":
		err = runDev(ctx, args[1:], stdout, stderr)
	case "token":
		err = runToken(args[1:], stdout, stderr)
	case "version", "--version":
		err = runVersion(args[1:], stdout)
	case "login":
		err = runLogin(ctx, args[1:], stdout, stderr)
	case "credential":
		err = runCredential(ctx, args[1:], stdout, stderr)
	case "logout":
		err = runLogout(ctx, args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "tether: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0 // the flags' usage is printed
	}
	if err != nil {
		if msg := err.Error(); msg != "" {
			fmt.Fprintln(stderr, msg)
		}
		return 1
	}
	return 0
}

// isHelp says whether arg asks for help rather than being a mistake.
func isHelp(arg string) bool {
	switch arg {
	case "help", "-h", "-help", "--help":
		return true
	}
	return false
}
