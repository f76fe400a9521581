// Command kubectl is Kubernetes' kubectl, built from the k8s.io/kubectl
// module at the version this module pins. It is the same program as
// Kubernetes' own cmd/kubectl.
package main

import (
	"os"

	_ "k8s.io/client-go/plugin/pkg/client/auth" // exec and OIDC auth plugins
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	// Set the log verbosity before the command is built, as kubectl's own
	// main does: building it already logs (plugins, .kuberc).
	logs.GlogSetter(cmd.GetLogVerbosity(os.Args)) //nolint:errcheck
	command := cmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		util.CheckErr(err)
	}
}
