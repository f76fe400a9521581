// Command kube-controller-manager is Kubernetes' controller manager, built
// from the k8s.io/kubernetes module at the version this module requires. It
// is the same program as Kubernetes' own cmd/kube-controller-manager.
package main

import (
	"os"
	_ "time/tzdata" // CronJob time zones, as in Kubernetes' own build

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // --logging-format=json
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // the build info metric
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	os.Exit(cli.Run(app.NewControllerManagerCommand()))
}
