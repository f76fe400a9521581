package server

import (
	"strings"
	"testing"
	"time"
)

func TestCoordinationOptions(t *testing.T) {
	base := func(extra map[string]string) func(string) string {
		m := map[string]string{"TETHER_PUBLIC_URL": "https://t", "TETHER_USERS": "- name: alice\n  token: 0123456789abcdef0123456789abcdef\n",
			"TETHER_COORDINATION": "kubernetes", "TETHER_TOKEN_SIGNING_KEY_FILE": "/keys/signing-key.pem",
			"TETHER_COORDINATION_NAMESPACE": "tether", "TETHER_REPLICA_NAME": "hub-7c9f-x2", "TETHER_PEER_ADDR": "10.0.3.7:8444"}
		for k, v := range extra {
			if v == "" {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
		return func(k string) string { return m[k] }
	}
	o, err := OptionsFromEnv(base(map[string]string{"TETHER_DRAIN_DELAY_SECONDS": "10"}), true)
	if err != nil {
		t.Fatal(err)
	}
	want := ReplicaOptions{Namespace: "tether", Name: "hub-7c9f-x2", PeerAddr: "10.0.3.7:8444", PeerListenAddr: ":8444"}
	if o.Coordination != CoordinationKubernetes || o.Replica != want || o.DrainDelay != 10*time.Second {
		t.Errorf("got %q %+v %s", o.Coordination, o.Replica, o.DrainDelay)
	}
	o, err = OptionsFromEnv(base(map[string]string{"TETHER_COORDINATION": ""}), true)
	if err != nil || o.Coordination != CoordinationNone || o.Replica != (ReplicaOptions{}) || o.DrainDelay != 0 {
		t.Errorf("unset: %q %+v %s, %v", o.Coordination, o.Replica, o.DrainDelay, err)
	}
	for _, tt := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"TETHER_COORDINATION": "etcd"}, `TETHER_COORDINATION must be none (one hub) or kubernetes (replicas coordinating through the Kubernetes API), not "etcd"`},
		{map[string]string{"TETHER_TOKEN_SIGNING_KEY_FILE": ""}, "TETHER_COORDINATION=kubernetes needs TETHER_TOKEN_SIGNING_KEY_FILE, the same on every replica"},
		{map[string]string{"TETHER_PEER_ADDR": ""}, "TETHER_PEER_ADDR must be set, to the host:port where the other replicas reach this one"},
		{map[string]string{"TETHER_PEER_ADDR": "10.0.3.7"}, `TETHER_PEER_ADDR must be a host:port, like 10.0.3.7:8444, not "10.0.3.7"`},
		{map[string]string{"TETHER_PEER_LISTEN_ADDR": "8444"}, `TETHER_PEER_LISTEN_ADDR must be an address like :8444, not "8444"`},
		{map[string]string{"TETHER_COORDINATION_NAMESPACE": "Tether_NS"}, `TETHER_COORDINATION_NAMESPACE must be a namespace's name, not "Tether_NS"`},
		{map[string]string{"TETHER_REPLICA_NAME": "Hub A"}, `TETHER_REPLICA_NAME must be a DNS name of at most 63 characters, like a pod's, not "Hub A"`},
		{map[string]string{"TETHER_DRAIN_DELAY_SECONDS": "-1"}, "TETHER_DRAIN_DELAY_SECONDS must be a whole number of seconds, at least 0"},
	} {
		_, err := OptionsFromEnv(base(tt.env), true)
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("%v: got %v, want %q", tt.env, err, tt.want)
		}
	}
}
