// Command tether is Tether's one binary: the hub, the agent, and the tools
// around them. It only reads settings and calls into internal packages.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `Tether reaches private Kubernetes clusters from one hub.

Usage:
  tether hub       run the hub (settings: TETHER_… environment variables)
  tether agent     run the agent in a cluster
  tether dev       run a local API server, a hub and an agent on this machine
  tether token     make a new agent token and its agents-list entry
  tether version   print the version
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
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
		err = runToken(args[1:], stdout)
	case "version", "--version":
		err = runVersion(stdout)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "tether: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if err != nil {
		if msg := err.Error(); msg != "" {
			fmt.Fprintln(stderr, msg)
		}
		return 1
	}
	return 0
}
