package peers

import (
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/hub"
)

// FuzzDecode: a line of another replica's claims stream never panics the
// reader, and a claim it takes names a cluster and a status.
func FuzzDecode(f *testing.F) {
	f.Add(encode(message{Type: typeClaim, Cluster: "eu-1", Since: time.Unix(1, 0), Instance: "a", Connection: 2,
		Status: &hub.ClusterStatus{Status: hub.Ready}, History: []hub.StatusChange{{Status: hub.Ready}}}))
	f.Add(encode(message{Type: typeUnclaim, Cluster: "eu-1"}))
	f.Add(encode(message{Type: typePing}))
	f.Add([]byte(`{"type":"claim","cluster":"x","status":null}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		m, err := decode(line)
		if err != nil {
			return
		}
		if m.Type == typeClaim && (m.Cluster == "" || m.Status == nil) {
			t.Errorf("decode took a claim without a cluster or status: %q", line)
		}
	})
}
