//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kubernetes/pkg/fieldpath"
	"k8s.io/kubernetes/third_party/forked/golang/expansion"
)

// resolve turns a container of pod into what to run: its env resolved (the
// API server asked for secrets and config maps) and $(VAR) references in
// env, command and args expanded, as the kubelet does.
//
// A container's environment starts from PATH and HOME of this machine, so
// that commands are found as on the host, and KUBERNETES_SERVICE_HOST and
// _PORT name the API server, so that in-cluster clients find it.
func (k *kubelet) resolve(ctx context.Context, pod *v1.Pod, c v1.Container) (runSpec, error) {
	argv := append(append([]string(nil), c.Command...), c.Args...)
	if len(argv) == 0 {
		return runSpec{}, fmt.Errorf("container %q has neither command nor args: images are ignored here, so there is nothing to run", c.Name)
	}
	host, port, _ := net.SplitHostPort(k.api.Host)
	if port == "" {
		host, port = k.api.Host, "443"
	}
	env := []struct{ name, value string }{
		{"PATH", os.Getenv("PATH")},
		{"HOME", os.Getenv("HOME")},
		{"HOSTNAME", pod.Name},
		{"KUBERNETES_SERVICE_HOST", host},
		{"KUBERNETES_SERVICE_PORT", port},
	}
	vars := make(map[string]string)
	for _, e := range env {
		vars[e.name] = e.value
	}
	mapping := expansion.MappingFuncFor(vars)
	var errs []error
	for _, e := range c.Env {
		value := e.Value
		if e.ValueFrom == nil {
			value = expansion.Expand(value, mapping)
		} else {
			v, err := k.valueFrom(ctx, pod, e.ValueFrom)
			if err != nil {
				errs = append(errs, fmt.Errorf("env %s: %w", e.Name, err))
				continue
			}
			value = v
		}
		vars[e.Name] = value
		env = append(env, struct{ name, value string }{e.Name, value})
	}
	if err := errors.Join(errs...); err != nil {
		return runSpec{}, err
	}
	for i, a := range argv {
		argv[i] = expansion.Expand(a, mapping)
	}
	spec := runSpec{
		name: c.Name, argv: argv, dir: c.WorkingDir,
		stdin: c.Stdin, stdinOnce: c.StdinOnce, tty: c.TTY,
	}
	// Later entries win, as in a container: keep the last of each name.
	seen := make(map[string]bool)
	for i := len(env) - 1; i >= 0; i-- {
		if !seen[env[i].name] {
			seen[env[i].name] = true
			spec.env = append([]string{env[i].name + "=" + env[i].value}, spec.env...)
		}
	}
	return spec, nil
}

// valueFrom resolves an env var's source; a resource field has no value
// here since nothing sets limits.
func (k *kubelet) valueFrom(ctx context.Context, pod *v1.Pod, src *v1.EnvVarSource) (string, error) {
	optional := func(o *bool) bool { return o != nil && *o }
	switch {
	case src.FieldRef != nil:
		switch src.FieldRef.FieldPath {
		case "spec.nodeName":
			return pod.Spec.NodeName, nil
		case "spec.serviceAccountName":
			return pod.Spec.ServiceAccountName, nil
		case "status.hostIP", "status.podIP", "status.hostIPs", "status.podIPs":
			return "127.0.0.1", nil
		}
		return fieldpath.ExtractFieldPathAsString(pod, src.FieldRef.FieldPath)
	case src.SecretKeyRef != nil:
		ref := src.SecretKeyRef
		s, err := k.client.CoreV1().Secrets(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			if optional(ref.Optional) {
				return "", nil
			}
			return "", err
		}
		v, ok := s.Data[ref.Key]
		if !ok && !optional(ref.Optional) {
			return "", fmt.Errorf("secret %q has no key %q", ref.Name, ref.Key)
		}
		return string(v), nil
	case src.ConfigMapKeyRef != nil:
		ref := src.ConfigMapKeyRef
		cm, err := k.client.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			if optional(ref.Optional) {
				return "", nil
			}
			return "", err
		}
		v, ok := cm.Data[ref.Key]
		if !ok && !optional(ref.Optional) {
			return "", fmt.Errorf("config map %q has no key %q", ref.Name, ref.Key)
		}
		return v, nil
	}
	return "", nil
}
