package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tetherhq/tether/internal/localkube"
)

// replicaSet is like a Deployment's old ReplicaSet: scaled to zero, its
// pod template whole, as a cluster keeps ten of them per Deployment.
func replicaSet(ns string, i int) map[string]any {
	p := pod(ns, i)
	meta := p["metadata"].(map[string]any)
	hash := strconv.Itoa(i)
	return map[string]any{
		"apiVersion": "apps/v1", "kind": "ReplicaSet",
		"metadata": map[string]any{
			"name": fmt.Sprintf("app-%d-%s", i/10, hash), "namespace": ns,
			"labels":      map[string]any{"app": meta["labels"].(map[string]any)["app"], "pod-template-hash": hash},
			"annotations": map[string]any{"deployment.kubernetes.io/revision": strconv.Itoa(i%10 + 1), "deployment.kubernetes.io/desired-replicas": "2"},
		},
		"spec": map[string]any{
			"replicas": 0,
			"selector": map[string]any{"matchLabels": map[string]any{"pod-template-hash": hash}},
			"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"pod-template-hash": hash}}, "spec": p["spec"]},
		},
	}
}

// workflowCRD is Argo Workflows' CRD, cut to what the bench needs.
const workflowCRD = `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
"metadata":{"name":"workflows.argoproj.io"},
"spec":{"group":"argoproj.io","scope":"Namespaced",
 "names":{"kind":"Workflow","listKind":"WorkflowList","plural":"workflows","singular":"workflow"},
 "versions":[{"name":"v1alpha1","served":true,"storage":true,
  "schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}]}}`

// createWorkflows installs the Workflow CRD and creates n finished
// Workflows over the bench's namespaces: each with a status of 20 nodes,
// and one in 50 with 2,000, about a megabyte, as a long fan-out leaves.
// It returns their JSON size together.
func createWorkflows(ctx context.Context, c *localkube.Cluster, n int) (int, error) {
	var crd map[string]any
	if err := json.Unmarshal([]byte(workflowCRD), &crd); err != nil {
		return 0, err
	}
	if err := c.Do(ctx, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd, nil); err != nil && !isConflict(err) {
		return 0, err
	}
	// The API server serves it once it is established.
	for deadline := time.Now().Add(time.Minute); ; {
		if err := c.Do(ctx, "GET", "/apis/argoproj.io/v1alpha1/workflows?limit=1", nil, nil); err == nil {
			break
		} else if time.Now().After(deadline) {
			return 0, fmt.Errorf("the Workflow CRD is not served after a minute: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	total := 0
	for i := range n {
		b, _ := json.Marshal(workflow("bench-00", i))
		total += len(b)
	}
	// Four at a time: megabyte objects, 32 at once, outlast the API
	// server's request timeout on a shared machine.
	return total, createAllBy(ctx, c, n, 4, func(ns string, i int) (string, map[string]any) {
		return "/apis/argoproj.io/v1alpha1/namespaces/" + ns + "/workflows", workflow(ns, i)
	})
}

func workflow(ns string, i int) map[string]any {
	name := fmt.Sprintf("etl-%05d", i)
	count := 20
	if i%50 == 0 {
		count = 2000
	}
	nodes := make(map[string]any, count)
	for j := range count {
		id := fmt.Sprintf("%s-%010d", name, j)
		nodes[id] = map[string]any{
			"id": id, "name": fmt.Sprintf("%s[%d].transform(%d:shard-%d)", name, j/100, j, j), "displayName": fmt.Sprintf("transform(%d)", j),
			"type": "Pod", "templateName": "transform", "phase": "Succeeded", "boundaryID": name,
			"startedAt": "2026-12-01T10:00:00Z", "finishedAt": "2026-12-01T10:03:00Z", "progress": "1/1",
			"resourcesDuration": map[string]any{"cpu": 12, "memory": 340},
			"inputs":            map[string]any{"parameters": []any{map[string]any{"name": "shard", "value": strconv.Itoa(j)}}},
			"outputs":           map[string]any{"exitCode": "0", "artifacts": []any{map[string]any{"name": "main-logs", "s3": map[string]any{"key": name + "/" + id + "/main.log"}}}},
			"hostNodeName":      "node-" + strconv.Itoa(j%40),
			"message":           strings.Repeat("ok ", 20),
		}
	}
	return map[string]any{
		"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
		"metadata": map[string]any{"name": name, "namespace": ns, "labels": map[string]any{"workflows.argoproj.io/completed": "true", "workflows.argoproj.io/phase": "Succeeded"}},
		"spec":     map[string]any{"entrypoint": "main", "workflowTemplateRef": map[string]any{"name": "etl"}},
		"status": map[string]any{
			"phase": "Succeeded", "startedAt": "2026-12-01T10:00:00Z", "finishedAt": "2026-12-01T11:00:00Z", "progress": fmt.Sprintf("%d/%d", count, count),
			"nodes": nodes,
		},
	}
}
