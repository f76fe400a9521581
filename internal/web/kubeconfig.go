package web

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/kubeproxy"
	"github.com/tetherhq/tether/internal/login"
)

// ServeKubeconfig answers GET /api/kubeconfig with a kubeconfig for every
// cluster the person may see, authenticated by a token the hub signs for
// them (SPEC section 3).
func (wb *Web) ServeKubeconfig(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if wb.refuseOtherSites(w, r) {
		return
	}
	p, ok, err := wb.cookiePerson(r)
	if err != nil || !ok {
		if err != nil {
			wb.cfg.Proxy.LogAuthFailure(r, err)
		}
		if refusedIdentity(err) {
			http.Error(w, err.Error(), http.StatusForbidden)
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="tether"`)
		msg := "Tether doesn't know who you are: sign in first."
		if err != nil || r.Header.Get("Authorization") != "" {
			msg = kubeproxy.Unauthorized(err) // a token came, and isn't one the hub takes
		}
		http.Error(w, msg, http.StatusUnauthorized)
		return
	}
	// Asked for with a hub-issued token (a page session's, a kubeconfig's),
	// the kubeconfig expires with it: no token makes a longer-lived one.
	token, _, err := wb.cfg.Auth.IssueToken(p)
	if errors.Is(err, auth.ErrExpired) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="tether"`)
		http.Error(w, "Your token has expired: sign in again, or get a new kubeconfig.", http.StatusUnauthorized)
		return
	}
	if err != nil {
		wb.log.Error("Can't sign a kubeconfig token", "user", p.Name, "err", err)
		http.Error(w, "The hub can't sign a token now.", http.StatusInternalServerError)
		return
	}
	body, err := wb.kubeconfig(p, token)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/yaml")
	w.Header().Set("Content-Disposition", `attachment; filename="tether.kubeconfig"`)
	w.Write(body)
}

// kubeconfig renders a kubeconfig for the clusters p may see, sorted by
// name, the first one current. Its names are those `tether login` writes
// (login.Names): "<hub host>/<cluster>" for contexts and clusters, and the
// hub's host for the user, so that kubeconfigs from two hubs merge without
// one's prod replacing the other's (decision 036).
func (wb *Web) kubeconfig(p auth.Person, token string) ([]byte, error) {
	type named struct {
		Name    string         `json:"name"`
		Cluster map[string]any `json:"cluster,omitempty"`
		User    map[string]any `json:"user,omitempty"`
		Context map[string]any `json:"context,omitempty"`
	}
	names := wb.visibleNames(p)
	kn := login.Names{Prefix: login.Prefix(wb.cfg.PublicURL)}
	cfg := map[string]any{
		"apiVersion":  "v1",
		"kind":        "Config",
		"preferences": map[string]any{},
		"users":       []named{{Name: kn.User(), User: map[string]any{"token": token}}},
	}
	clusters, contexts := []named{}, []named{}
	base := strings.TrimSuffix(wb.cfg.PublicURL, "/")
	var ca []byte
	if wb.cfg.KubeconfigCA != nil {
		ca = wb.cfg.KubeconfigCA()
	}
	for _, n := range names {
		c := map[string]any{"server": base + "/clusters/" + n}
		if len(ca) > 0 {
			c["certificate-authority-data"] = base64.StdEncoding.EncodeToString(ca)
		}
		clusters = append(clusters, named{Name: kn.Context(n), Cluster: c})
		contexts = append(contexts, named{Name: kn.Context(n), Context: map[string]any{"cluster": kn.Context(n), "user": kn.User()}})
	}
	cfg["clusters"], cfg["contexts"] = clusters, contexts
	if len(names) > 0 {
		cfg["current-context"] = kn.Context(names[0])
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("render kubeconfig: %w", err)
	}
	return out, nil
}
