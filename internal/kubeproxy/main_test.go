package kubeproxy

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/hub"
	"github.com/tetherhq/tether/internal/testutil/upstream"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const testUsers = `
- name: alice
  token: alice-token-0123456789abcdef0123456789
  groups: [dev]
- name: bob
  token: bob-token-0123456789abcdef0123456789ab
  groups: [ops]
`

// oneCluster is Clusters with one cluster, c, that everyone may see, and
// no agent connected.
type oneCluster struct{}

func (oneCluster) Reach(string) hub.Upstream { return nil }

func (oneCluster) Cluster(name string) (hub.ClusterStatus, bool) {
	return hub.ClusterStatus{Name: name, Status: hub.Unreachable, Message: hub.MessageNotConnected}, name == "c"
}

func (oneCluster) Entry(name string) (fleet.Agent, bool) {
	if name != "c" {
		return fleet.Agent{}, false
	}
	return fleet.Agent{Name: "c", Groups: fleet.Groups{Everyone: true}}, true
}

// fuzzProxy is a proxy whose people are cfg's, with one cluster, c, and
// no agent: enough for what runs on a request alone. It starts nothing.
func fuzzProxy(f *testing.F, cfg auth.Config) *Proxy {
	people, err := auth.New(cfg)
	if err != nil {
		f.Fatal(err)
	}
	px, err := New(Config{Clusters: oneCluster{}, Auth: people})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { px.Close(); people.Close() })
	return px
}

// fakeConn is cluster c's upstream as the fuzz targets see it.
func fakeConn() hub.Upstream {
	return &upstream.Fake{Name: "c", Auth: "Bearer service-account-token"}
}
