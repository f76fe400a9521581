package chart

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetherhq/tether/internal/testutil/helmtest"
)

// render runs helm template and decodes what it rendered.
func render(t *testing.T, h *helmtest.Helm, release, namespace, values string) []helmtest.Object {
	t.Helper()
	out, err := h.Template(release, namespace, values)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := helmtest.Objects(out)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// only returns the one object of kind, failing t if there are none or more.
func only(t *testing.T, objs []helmtest.Object, kind string) helmtest.Object {
	t.Helper()
	var found []helmtest.Object
	for _, o := range objs {
		if o.Kind() == kind {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d objects of kind %s rendered, want 1", len(found), kind)
	}
	return found[0]
}

func decode(t *testing.T, o helmtest.Object, into any) {
	t.Helper()
	b, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, into); err != nil {
		t.Fatal(err)
	}
}

// deployment is what the tests read of a Deployment.
type deployment struct {
	Metadata struct{ Name string }
	Spec     struct {
		Replicas *int
		Strategy struct {
			Type          string
			RollingUpdate *struct{ MaxUnavailable, MaxSurge any }
		}
		Template struct {
			Metadata struct{ Labels, Annotations map[string]string }
			Spec     podSpec
		}
	}
}

type podSpec struct {
	ServiceAccountName            string
	AutomountServiceAccountToken  *bool
	TerminationGracePeriodSeconds *int
	PriorityClassName             string
	NodeSelector                  map[string]string
	Tolerations                   []map[string]any
	Affinity                      map[string]any
	SecurityContext               map[string]any // the pod's
	ImagePullSecrets              []struct{ Name string }
	Containers                    []container
	Volumes                       []volume
	TopologySpreadConstraints     []map[string]any
}

type volume struct {
	Name   string
	Secret *struct{ SecretName string }
}

func (p podSpec) volume(name string) *volume {
	for i := range p.Volumes {
		if p.Volumes[i].Name == name {
			return &p.Volumes[i]
		}
	}
	return nil
}

type container struct {
	Image           string
	ImagePullPolicy string
	SecurityContext map[string]any
	Args            []string
	Env             []envVar
	Ports           []struct {
		Name          string
		ContainerPort int
		Protocol      string
	}
	ReadinessProbe *probe
	LivenessProbe  *probe
	Resources      struct{ Requests, Limits map[string]string }
	VolumeMounts   []struct {
		Name, MountPath, SubPath string
	}
}

type envVar struct {
	Name, Value string
	ValueFrom   *struct {
		SecretKeyRef    *struct{ Name, Key string }
		ConfigMapKeyRef *struct {
			Name, Key string
			Optional  *bool
		}
		FieldRef *struct{ FieldPath string }
	}
}

type probe struct {
	HTTPGet *struct {
		Path, Scheme string
		Port         int
	}
	TCPSocket                       *struct{ Port int }
	PeriodSeconds, FailureThreshold int
}

func (c container) envVar(name string) *envVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

// env is the literal value of the setting name, "" when unset.
func env(c container, name string) string {
	if e := c.envVar(name); e != nil {
		return e.Value
	}
	return ""
}

// mountOf returns the mount that holds path, if any.
func mountOf(c container, path string) *struct{ Name, MountPath, SubPath string } {
	if path == "" {
		return nil
	}
	for i := range c.VolumeMounts {
		m := &c.VolumeMounts[i]
		if filepath.Dir(path) == m.MountPath || strings.HasPrefix(path, m.MountPath+"/") {
			return m
		}
	}
	return nil
}

// js shows v in a failure message.
func js(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return err.Error()
	}
	return string(b)
}
