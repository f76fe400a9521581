package web

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/tetherhq/tether/internal/inventory/store"
)

// objectRef is what ?object= takes: "Kind/name", as an event's
// involvedObject and an owner name it.
var objectRef = regexp.MustCompile(`^[A-Z][A-Za-z0-9]{0,62}/[a-z0-9]([-a-z0-9.:]{0,251}[a-z0-9])?$`)

// ServeObjectEvents answers /api/clusters/<name>/events?namespace=&object=:
// the Warning events of one object, the latest of each reason, newest
// first (store.MaxEventsPerObject at most), those in namespaces where the
// person may list events.
func (wb *Web) ServeObjectEvents(w http.ResponseWriter, r *http.Request) {
	name, p, ok := wb.visiblePerson(w, r)
	if !ok {
		return
	}
	if wb.forwarded(w, r, name, p, "/events") {
		return
	}
	v := r.URL.Query()
	ns, object := v.Get("namespace"), v.Get("object")
	if !objectRef.MatchString(object) {
		http.Error(w, fmt.Sprintf("object %q is not Kind/name, like object=Pod/web-1", object), http.StatusBadRequest)
		return
	}
	if ns != "" {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			http.Error(w, fmt.Sprintf("namespace %q is not a Kubernetes namespace name: %s", ns, errs[0]), http.StatusBadRequest)
			return
		}
	}
	if _, known := wb.cfg.Clusters.Inventory().Info(name); !known {
		http.Error(w, fmt.Sprintf("Cluster %q has sent no inventory yet.", name), http.StatusServiceUnavailable)
		return
	}
	check := wb.checkAccess(name, p, newReviewBudget(wb.cfg.AccessReviewsPerQuery))
	events := wb.cfg.Clusters.Inventory().Events(name, ns, object, check.allow(r.Context()))
	if err := check.failed(); err != nil {
		http.Error(w, fmt.Sprintf("Tether can't ask cluster %q what you may list, so it shows you nothing: %v", name, err), http.StatusServiceUnavailable)
		return
	}
	if why := check.leftOut("events"); why != "" {
		w.Header().Set(leftOutTrailer, leftOutOf(name, why))
	}
	if events == nil {
		events = []store.Item{}
	}
	writeJSON(w, events)
}

// ServeDomains answers /api/clusters/<name>/domains: every host the
// cluster's Istio Gateways expose, with the gateway that wins it or the
// conflict, those served by a gateway the person may list (as
// /gateways?host= decides them).
func (wb *Web) ServeDomains(w http.ResponseWriter, r *http.Request) {
	name, p, ok := wb.visiblePerson(w, r)
	if !ok {
		return
	}
	if wb.forwarded(w, r, name, p, "/domains") {
		return
	}
	if _, known := wb.cfg.Clusters.Inventory().Info(name); !known {
		http.Error(w, fmt.Sprintf("Cluster %q has sent no inventory yet.", name), http.StatusServiceUnavailable)
		return
	}
	check := wb.checkAccess(name, p, newReviewBudget(wb.cfg.AccessReviewsPerQuery))
	domains := wb.cfg.Clusters.Inventory().Domains(name, check.allow(r.Context()))
	if err := check.failed(); err != nil {
		http.Error(w, fmt.Sprintf("Tether can't ask cluster %q what you may list, so it shows you nothing: %v", name, err), http.StatusServiceUnavailable)
		return
	}
	if why := check.leftOut("gateways"); why != "" {
		// Hosts whose gateways are in namespaces left unchecked are left
		// out, never given to another gateway: the list is short, not
		// wrong.
		w.Header().Set(leftOutTrailer, leftOutOf(name, strings.Replace(why, "with matches", "with gateways", 1)))
	}
	if domains == nil {
		domains = []store.Domain{}
	}
	writeJSON(w, domains)
}
