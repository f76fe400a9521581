// Command prepare builds the Kubernetes binaries the end-to-end tests use
// (see internal/localkube) and prints their paths. `make test` runs it
// before `go test`, so that the first build, which takes minutes, does not
// count against the tests' timeouts.
//
//	go run ./test/prepare
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/tetherhq/tether/internal/localkube"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	p, err := localkube.Binaries(ctx, localkube.BuildOptions{Logger: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("kube-apiserver %s\nkube-controller-manager %s\nkubectl %s\netcd %s\ntest-kubelet %s\n", p.APIServer, p.ControllerManager, p.Kubectl, p.Etcd, p.Kubelet)
}
