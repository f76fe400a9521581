package chart

import (
	"testing"

	"github.com/tetherhq/tether/internal/testutil/helmtest"
)

// TestHubRecordings: hub.recordings mounts a volume where
// TETHER_RECORDINGS_DIR points, an emptyDir unless a claim is named, and
// sets the recordings' settings; off, nothing of it is rendered.
func TestHubRecordings(t *testing.T) {
	h := helmtest.New(t)
	type recVolume struct {
		Name                  string
		EmptyDir              *struct{ SizeLimit string }
		PersistentVolumeClaim *struct{ ClaimName string }
	}
	type dep struct {
		Spec struct {
			Template struct {
				Spec struct {
					Containers []container
					Volumes    []recVolume
				}
			}
		}
	}
	read := func(values string) (container, *recVolume) {
		var d dep
		decode(t, only(t, render(t, h, "hub", "tether", values), "Deployment"), &d)
		ctr := d.Spec.Template.Spec.Containers[0]
		for i, v := range d.Spec.Template.Spec.Volumes {
			if v.Name == "recordings" {
				return ctr, &d.Spec.Template.Spec.Volumes[i]
			}
		}
		return ctr, nil
	}

	ctr, v := read(hubValues)
	if v != nil || ctr.envVar("TETHER_RECORDINGS_DIR") != nil {
		t.Errorf("off by default, but a volume %+v and TETHER_RECORDINGS_DIR are rendered", v)
	}

	ctr, v = read(hubValues + `  recordings:
    enabled: true
    sizeLimit: 5Gi
    maxBytes: 16Mi
    retention: 7d
    viewers: [auditors, sre]
`)
	dir := env(ctr, "TETHER_RECORDINGS_DIR")
	if m := mountOf(ctr, dir+"/c1/id.cast"); dir == "" || m == nil || m.Name != "recordings" {
		t.Errorf("TETHER_RECORDINGS_DIR=%q is not the recordings' volume (%+v)", dir, m)
	}
	if v == nil || v.EmptyDir == nil || v.EmptyDir.SizeLimit != "5Gi" {
		t.Errorf("volume %+v, want an emptyDir of 5Gi", v)
	}
	for k, want := range map[string]string{"TETHER_RECORDINGS_ALL": "false", "TETHER_RECORDINGS_MAX_BYTES": "16Mi",
		"TETHER_RECORDINGS_RETENTION": "7d", "TETHER_RECORDINGS_VIEWERS": "auditors,sre"} {
		if got := env(ctr, k); got != want {
			t.Errorf("%s=%q, want %q", k, got, want)
		}
	}

	_, v = read(hubValues + `  recordings:
    enabled: true
    claimName: tether-recordings
`)
	if v == nil || v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != "tether-recordings" || v.EmptyDir != nil {
		t.Errorf("volume %+v, want the claim tether-recordings", v)
	}
}
