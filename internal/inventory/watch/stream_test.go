package watch

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/tetherhq/tether/internal/inventory"
	"github.com/tetherhq/tether/internal/protocol"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestAnObjectTooLargeForAMessageGoesOutCut: a Gateway with hosts enough to
// be over the message size alone (an object a cluster can hold) goes out
// with the first of its hosts, rather than fail the stream, which would keep
// the whole inventory from arriving at every try; and what came with it in
// the same Update goes out too.
func TestAnObjectTooLargeForAMessageGoesOutCut(t *testing.T) {
	gw := protocol.Resource{ResourceRef: protocol.ResourceRef{Kind: "gateways", Namespace: "istio-system", Name: "main"}, Ready: true}
	for i := range 60000 {
		gw.Hosts = append(gw.Hosts, fmt.Sprintf("shop-%05d.example.com", i))
	}
	hosts := gw.Hosts
	gone := protocol.ResourceRef{Kind: "pods", Namespace: "shop", Name: "web-1"}
	var out bytes.Buffer
	u := &protocol.Update{Snapshot: true, Complete: true, Upserts: []protocol.Resource{gw}, Deletes: []protocol.ResourceRef{gone}}
	if err := writeSplitting(&out, u); err != nil {
		t.Fatalf("writeSplitting: %v", err)
	}
	var got []*protocol.Update
	for {
		u, err := protocol.ReadUpdate(&out)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, u)
	}
	if len(got) != 2 || !got[0].Snapshot || got[0].Complete || !got[1].Complete {
		t.Fatalf("%d updates: %+v", len(got), got)
	}
	if len(got[0].Upserts) != 1 || len(got[1].Deletes) != 1 || got[1].Deletes[0] != gone {
		t.Fatalf("the gateway and the delete: %+v / %+v", got[0].Deletes, got[1].Deletes)
	}
	sent := got[0].Upserts[0].Hosts
	if len(sent) == 0 || len(sent) >= len(hosts) || !slices.Equal(sent, hosts[:len(sent)]) {
		t.Errorf("sent %d hosts of %d; want the first ones, fewer", len(sent), len(hosts))
	}
	if len(gw.Hosts) != 60000 || !strings.HasSuffix(gw.Hosts[59999], "59999.example.com") {
		t.Error("cutting changed the watcher's copy")
	}
}

// TestAnObjectWhoseStatusAloneIsTooLargeGoesOutCut: an Argo CD Application
// whose health a broken controller (or anyone who may write its status)
// filled with more than a message holds has no list to cut; it goes out
// with that status cut, rather than fail the stream, which would keep the
// cluster's whole inventory from the hub at every try.
// TestKindsTooManyForAMessageGoOutCut: with an error at its bound for each
// of 8 kinds in each of 200 allowed namespaces, the kinds alone are over a
// message; they go out with their errors cut further, each still saying
// which kind fails where, and the objects with them.
func TestKindsTooManyForAMessageGoOutCut(t *testing.T) {
	var kinds []protocol.KindState
	for ns := range 200 {
		for _, k := range []string{"pods", "deployments", "statefulsets", "daemonsets", "jobs", "cronjobs", "services", "ingresses"} {
			kinds = append(kinds, protocol.KindState{Kind: k, Namespace: fmt.Sprintf("team-%d", ns), Error: strings.Repeat("the webhook said no; ", 60)})
		}
	}
	pod := protocol.Resource{ResourceRef: protocol.ResourceRef{Kind: "pods", Namespace: "team-1", Name: "web"}}
	var out bytes.Buffer
	if err := writeSplitting(&out, &protocol.Update{Snapshot: true, Complete: true, Kinds: kinds, Upserts: []protocol.Resource{pod}}); err != nil {
		t.Fatalf("writeSplitting: %v", err)
	}
	u, err := protocol.ReadUpdate(&out)
	if err != nil {
		t.Fatal(err)
	}
	if len(u.Kinds) != len(kinds) || len(u.Upserts) != 1 || !u.Complete {
		t.Fatalf("sent %d kinds, %d objects, complete %v; want %d, 1, true", len(u.Kinds), len(u.Upserts), u.Complete, len(kinds))
	}
	for i, k := range u.Kinds {
		if k.Kind != kinds[i].Kind || k.Namespace != kinds[i].Namespace || !strings.HasPrefix(k.Error, "the webhook said no") {
			t.Fatalf("kind %d sent as %+v", i, k)
		}
	}
	if kinds[0].Error != strings.Repeat("the webhook said no; ", 60) {
		t.Error("the watcher's own kind states were changed")
	}
}

func TestAnObjectWhoseStatusAloneIsTooLargeGoesOutCut(t *testing.T) {
	k, _ := inventory.LookupKind("applications")
	app := Summarize(k, &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": "shop", "namespace": "argocd"},
		"status": map[string]any{
			"sync":   map[string]any{"status": "Synced"},
			"health": map[string]any{"status": strings.Repeat("Degraded ", 150_000)},
		},
	}})
	var out bytes.Buffer
	if err := writeSplitting(&out, &protocol.Update{Snapshot: true, Complete: true, Upserts: []protocol.Resource{app}}); err != nil {
		t.Fatalf("writeSplitting: %v", err)
	}
	u, err := protocol.ReadUpdate(&out)
	if err != nil {
		t.Fatal(err)
	}
	if len(u.Upserts) != 1 || u.Upserts[0].Name != "shop" || !strings.HasPrefix(u.Upserts[0].Health, "Degraded") || u.Upserts[0].Sync != "Synced" {
		t.Fatalf("sent %+v; want the application, its health cut", u.Upserts)
	}
}
