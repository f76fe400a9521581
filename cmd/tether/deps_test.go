package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoClientset: the agents run this binary too, and client-go's clientset
// (or its informers, or a typed client, through kubernetes/scheme) registers
// every API group's types as the binary starts: it took an idle agent from
// 19.5 to 36.7 MiB (docs/decisions/032-replica-membership.md).
func TestNoClientset(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	var found []string
	for _, p := range strings.Fields(string(out)) {
		if p == "k8s.io/client-go/kubernetes" || strings.HasPrefix(p, "k8s.io/client-go/kubernetes/") || strings.HasPrefix(p, "k8s.io/client-go/informers") {
			found = append(found, p)
		}
	}
	if len(found) > 0 {
		t.Errorf("tether imports %d packages of client-go's clientset, among them %s", len(found), found[0])
	}
}
