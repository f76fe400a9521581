package main

import (
	"context"
	"fmt"
)

// kubeH2 measures the Kubernetes path as kubectl and client-go take it:
// HTTP/2 from the client (Go's net/http with ForceAttemptHTTP2 over TLS, as
// client-go's transport does), to the hub, to the API server direct with
// the same impersonation, and through the two copying relays carrying the
// same HTTP/2 (they copy bytes, so the client's HTTP/2 and TLS reach the API
// server whole): the small GET one at a time and the big lists, alternated
// as over HTTP/1.1. Every response is checked to have come over HTTP/2.
// With lists 0, only the small GET.
func kubeH2(ctx context.Context, r *report, h1 []*client, gets, lists int) error {
	clients := make([]*client, len(h1))
	for i, c := range h1 {
		clients[i] = &client{base: c.base, tls: c.tls, header: c.header, requestID: c.requestID, h2: true}
		clients[i].init(false)
	}
	defer func() {
		for _, c := range clients {
			c.c.CloseIdleConnections()
		}
	}()
	const path = "/api/v1/namespaces/" + benchNS + "/configmaps/small"
	lat, err := oneAtATime(ctx, clients, gets, path)
	if err != nil {
		return fmt.Errorf("HTTP/2: %w", err)
	}
	addGet(r, "kube-h2", "small GET over HTTP/2, one at a time", lat, func(f, g figure, added, _ float64) (figure, figure) {
		return atMostPlus(f, added, 0.30, "two relays'"), atMost(g, 1.30)
	})
	if lists == 0 {
		return nil
	}
	for _, noGzip := range []bool{false, true} {
		l, err := listPairs(ctx, clients[:viaProxy], lists, noGzip)
		if err != nil {
			return fmt.Errorf("HTTP/2: %w", err)
		}
		name, max := "21 MB list over HTTP/2, gzip (Go's default), hub ÷ direct", 1.10
		if noGzip {
			name, max = "21 MB list over HTTP/2, no gzip, hub ÷ direct", 1.30
		}
		r.add(atMost(figure{Section: "kube-h2", Name: name, Value: median(l.ratios), Unit: "×", Detail: l.detail()}, max))
	}
	return nil
}
