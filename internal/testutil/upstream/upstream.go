// Package upstream is a hub.Upstream for tests of what reaches clusters
// through the hub (internal/kubeproxy, internal/web) without an agent.
package upstream

import (
	"context"
	"errors"
	"net/http"

	"github.com/tetherhq/tether/internal/hub"
	"github.com/tetherhq/tether/internal/protocol"
)

// Fake is a cluster's API server as a hub.Upstream: Transport, if not nil,
// answers its requests; without one every request fails.
type Fake struct {
	Name      string
	APIHost   string // Host; "" means hub.APIServerName
	Auth      string // ServiceAccountAuth
	Transport http.RoundTripper
	Ctx       context.Context // Context; nil means one never done
	// CeilingIs and CeilingWhy are Ceiling's; "" means protocol.CeilingOff.
	CeilingIs, CeilingWhy string
	// ProxyOff and InventoryOff are the halves Halves says are off.
	ProxyOff, InventoryOff bool
	// ReplicaName is Replica's: the replica said to hold the agent.
	ReplicaName string
}

var _ hub.Upstream = (*Fake)(nil)

func (f *Fake) Cluster() string { return f.Name }

func (f *Fake) Host() string {
	if f.APIHost == "" {
		return hub.APIServerName
	}
	return f.APIHost
}

func (f *Fake) ServiceAccountAuth() string { return f.Auth }

func (f *Fake) RoundTrip(r *http.Request) (*http.Response, error) {
	if f.Transport == nil {
		return nil, errors.New("upstream.Fake: no Transport")
	}
	return f.Transport.RoundTrip(r)
}

func (f *Fake) Context() context.Context {
	if f.Ctx == nil {
		return context.Background()
	}
	return f.Ctx
}

func (f *Fake) Halves() (bool, bool) { return !f.ProxyOff, !f.InventoryOff }

func (f *Fake) Replica() string { return f.ReplicaName }

func (f *Fake) Ceiling() (string, string) {
	if f.CeilingIs == "" {
		return protocol.CeilingOff, ""
	}
	return f.CeilingIs, f.CeilingWhy
}
