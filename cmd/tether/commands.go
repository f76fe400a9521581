package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"

	"k8s.io/klog/v2"

	"github.com/tetherhq/tether/internal/agent"
	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/dev"
	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/listfile"
	"github.com/tetherhq/tether/internal/logging"
	"github.com/tetherhq/tether/internal/protocol"
	"github.com/tetherhq/tether/internal/server"
	"github.com/tetherhq/tether/internal/version"
)

func runHub(ctx context.Context, args []string, stderr io.Writer) error {
	if err := noArgs("hub", args); err != nil {
		return err
	}
	opts, err := server.OptionsFromEnv(os.Getenv, true)
	if err != nil {
		return err
	}
	log, err := logging.New(opts.LogFormat, stderr, slog.LevelInfo)
	if err != nil {
		return err
	}
	return server.Serve(ctx, opts, log, nil)
}

func runAgent(ctx context.Context, args []string, stderr io.Writer) error {
	if err := noArgs("agent", args); err != nil {
		return err
	}
	log, err := logging.New(os.Getenv("TETHER_LOG_FORMAT"), stderr, slog.LevelInfo)
	if err != nil {
		return err
	}
	opts, err := agent.OptionsFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		// docs/decisions/028-the-agents-memory-limit.md
		debug.SetMemoryLimit(agent.DefaultMemoryLimit)
	}
	// apimachinery, which the inventory uses, logs through klog; send its
	// lines to the agent's log.
	klog.SetSlogLogger(log)
	w, err := agent.NewWatcher(opts, log)
	if err != nil {
		return err
	}
	a, err := agent.New(agent.Config{Options: opts, Logger: log, Inventory: w})
	if err != nil {
		return err
	}
	err = a.Run(ctx)
	var refused *agent.RefusedError
	if errors.As(err, &refused) {
		return errAlreadyLogged
	}
	return err
}

// errAlreadyLogged makes the process exit non-zero without printing what the
// logger has already said.
var errAlreadyLogged = errors.New("")

func runDev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tether dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8080", "where the hub listens (loopback only)")
	if err := parse(fs, args); err != nil {
		return err
	}
	log, err := logging.New(os.Getenv("TETHER_LOG_FORMAT"), stderr, slog.LevelInfo)
	if err != nil {
		return err
	}
	return dev.Run(ctx, dev.Config{Addr: *addr, Logger: log, Out: stdout})
}

func runToken(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tether token", flag.ContinueOnError)
	fs.SetOutput(stderr)
	name := fs.String("name", "in-cluster", "the cluster's name in the hub's agents list (TETHER_AGENT_NAME)")
	person := fs.String("person", "", "make a person's token instead: their name in the hub's users list, as Kubernetes sees it (alice@example.com)")
	groups := fs.String("groups", "", "with --person: the person's groups, separated by commas (platform,oncall)")
	if err := parse(fs, args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["person"] && set["name"] {
		return errors.New("tether token takes --name (an agent's token) or --person (a person's), not both")
	}
	if set["groups"] && !set["person"] {
		return errors.New("tether token --groups goes with --person: agents have no groups")
	}
	token, err := fleet.NewToken()
	if err != nil {
		return err
	}
	sum := listfile.TokenSHA256(token)
	if set["person"] {
		var gs []string
		for g := range strings.SplitSeq(*groups, ",") {
			if g = strings.TrimSpace(g); g != "" {
				gs = append(gs, g)
			}
		}
		entry, err := auth.UsersEntry(*person, sum, gs)
		if err != nil {
			return fmt.Errorf("--person and --groups must make an entry the hub's users list takes: %w", err)
		}
		fmt.Fprintf(stdout, "Token (%q's bearer token, to sign in to the fleet page or fetch a kubeconfig; give it to them alone, it is not shown again):\n  %s\n\n", *person, token)
		fmt.Fprintf(stdout, "Its SHA-256:\n  %s\n\n", sum)
		fmt.Fprintf(stdout, "Entry for the hub's users list (TETHER_USERS or TETHER_USERS_FILE):\n%s", entry)
		return nil
	}
	if err := protocol.CheckName(*name); err != nil {
		return fmt.Errorf("--name must be the cluster's name in the hub's agents list (for a person's token, use --person): %w", err)
	}
	fmt.Fprintf(stdout, "Token (the agent's TETHER_AGENT_TOKEN; keep it secret, it is not shown again):\n  %s\n\n", token)
	fmt.Fprintf(stdout, "Its SHA-256:\n  %s\n\n", sum)
	fmt.Fprintf(stdout, "Entry for the hub's agents list (TETHER_FLEET_AGENTS or TETHER_FLEET_AGENTS_FILE):\n%s", fleet.AgentsEntry(*name, sum))
	return nil
}

func runVersion(args []string, stdout io.Writer) error {
	if err := noArgs("version", args); err != nil {
		return err
	}
	_, err := fmt.Fprintf(stdout, "tether %s\n", version.Version)
	return err
}

func noArgs(cmd string, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("tether %s takes no arguments (its settings are TETHER_… environment variables), not %q", cmd, args)
	}
	return nil
}

// parse parses a command's flags, and refuses anything after them: a
// mistyped flag (addr=…, say) would otherwise be silently ignored.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%s takes only flags (see %s --help), not %q", fs.Name(), fs.Name(), fs.Args())
	}
	return nil
}
