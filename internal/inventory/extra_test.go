package inventory

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParseExtraKinds(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []Kind
		err  string
	}{
		{in: "", want: nil},
		{in: " , ", want: nil},
		{in: "gateway.networking.k8s.io/v1/gateways", want: []Kind{{Name: "gateways.gateway.networking.k8s.io", Group: "gateway.networking.k8s.io", Versions: []string{"v1"}, Extra: true}}},
		{in: "v1/configmaps, /v1/persistentvolumeclaims", want: []Kind{
			{Name: "configmaps", Versions: []string{"v1"}, Extra: true},
			{Name: "persistentvolumeclaims", Versions: []string{"v1"}, Extra: true},
		}},
		{in: "events.k8s.io/v1/events", want: []Kind{{Name: "events.events.k8s.io", Group: "events.k8s.io", Versions: []string{"v1"}, Extra: true}}},
		{in: "v1/secrets", err: "never reads Secrets"},
		{in: "/v1/Secrets", err: "never reads Secrets"},
		{in: "v1/pods", err: "watches pods already"},
		{in: "argoproj.io/v1alpha1/rollouts", err: "watches rollouts already"},
		{in: "v1/configmaps,v1/configmaps", err: "named twice"},
		{in: "configmaps", err: "not group/version/resource"},
		{in: "a/b/c/d", err: "not group/version/resource"},
		{in: "x.io//things", err: "not group/version/resource"},
		{in: "x.io/v1/th ings", err: "not a resource's plural name"},
		{in: "x_io/v1/things", err: "not an API group"},
	} {
		got, err := ParseExtraKinds(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseExtraKinds(%q): %v, want an error with %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseExtraKinds(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
	if _, err := ParseExtraKinds("v1/secrets"); !errors.Is(err, ErrSecrets) {
		t.Errorf("secrets: %v, want ErrSecrets", err)
	}
	k := Kind{Name: "gateways.gateway.networking.k8s.io", Group: "gateway.networking.k8s.io", Extra: true}
	if k.Plural() != "gateways" || k.Resource().Resource != "gateways" {
		t.Errorf("Plural %q", k.Plural())
	}
}
