package kubeproxy

import (
	"net/http/httptest"
	"testing"

	"github.com/tetherhq/tether/internal/auth"
)

func TestOpenKindOf(t *testing.T) {
	for _, tc := range []struct {
		method, target string
		upgrade        bool
		want           openKind
	}{
		{"GET", "/api/v1/pods", false, kindRequest},
		{"GET", "/api/v1/pods?watch=true", false, kindWatch},
		{"GET", "/api/v1/namespaces/a/pods?watch=1&resourceVersion=5", false, kindWatch},
		{"GET", "/api/v1/pods?watch=True", false, kindWatch},
		{"GET", "/api/v1/pods?watch=false", false, kindRequest},
		{"GET", "/api/v1/pods?watch=0", false, kindRequest},
		{"GET", "/api/v1/watch/namespaces/a/pods", false, kindWatch},
		{"GET", "/apis/apps/v1/watch/deployments", false, kindWatch},
		{"GET", "/api/v1/namespaces/watch/pods", false, kindRequest}, // a namespace named watch
		{"POST", "/api/v1/pods?watch=true", false, kindRequest},
		{"POST", "/api/v1/namespaces/a/pods/p/exec?command=sh", true, kindSession},
		{"GET", "/api/v1/namespaces/a/pods/p/portforward", true, kindSession},
		{"GET", "/api/v1/namespaces/a/pods/p/log?follow=true", false, kindRequest},
	} {
		r := httptest.NewRequest(tc.method, tc.target, nil)
		if tc.upgrade {
			r.Header.Set("Upgrade", "websocket")
		}
		if got := openKindOf(r, r.URL.Path); got != tc.want {
			t.Errorf("%s %s (upgrade %v): kind %d, want %d", tc.method, tc.target, tc.upgrade, got, tc.want)
		}
	}
}

// TestOpenSetCounts: the bound is per cluster, person and kind, and a
// request that ends frees its place.
func TestOpenSetCounts(t *testing.T) {
	var s openSet
	req := func(cluster, person string, kind openKind) *openRequest {
		return &openRequest{cluster: cluster, person: auth.Person{Name: person}, kind: kind, cancel: func(error) {}}
	}
	var held []*openRequest
	for range 2 {
		r := req("eu-1", "alice", kindWatch)
		if !s.add(r, 2) {
			t.Fatal("refused a watch under the bound")
		}
		held = append(held, r)
	}
	if s.add(req("eu-1", "alice", kindWatch), 2) {
		t.Fatal("took a third watch with a bound of 2")
	}
	for _, other := range []*openRequest{req("us-1", "alice", kindWatch), req("eu-1", "bob", kindWatch), req("eu-1", "alice", kindRequest), req("eu-1", "alice", kindSession)} {
		if !s.add(other, 2) {
			t.Errorf("refused %+v: another cluster, person or kind", other)
		}
	}
	s.remove(held[0])
	s.remove(held[0]) // twice is once
	if got := s.count("eu-1", "alice", kindWatch); got != 1 {
		t.Fatalf("%d watches counted after one ended, want 1", got)
	}
	if !s.add(req("eu-1", "alice", kindWatch), 2) {
		t.Fatal("refused a watch after one ended")
	}
	if s.add(req("eu-1", "carol", kindWatch), 0); s.count("eu-1", "carol", kindWatch) != 1 {
		t.Fatal("a bound of 0 is no bound")
	}
}
