package store

import (
	"sort"
)

// MaxEventsPerObject is how many Warning events the cluster page shows
// beside an object: the last, one per reason (issue 36).
const MaxEventsPerObject = 5

// Events returns the Warning events of cluster about object ("Kind/name",
// as an event's involvedObject and an owner name it) in namespace: the
// latest of each reason, newest first, at most MaxEventsPerObject. For a
// cluster-scoped object (namespace "") its events in any namespace count:
// Kubernetes files a node's in "default". allow is asked, as for
// resources, whether the person may list events in each namespace.
func (s *Store) Events(cluster, namespace, object string, allow Allow) []Item {
	s.mu.RLock()
	st := s.clusters[cluster]
	if st == nil {
		s.mu.RUnlock()
		return nil
	}
	latest := map[string]Item{} // by reason
	for _, ev := range st.objects["events"] {
		if ev.Object != object || namespace != "" && ev.Namespace != namespace {
			continue
		}
		// RFC 3339 times in UTC compare as strings; a tie goes to the
		// name, so the answer is the same each time.
		if old, ok := latest[ev.Reason]; ok && (old.LastSeen > ev.LastSeen || old.LastSeen == ev.LastSeen && old.Name > ev.Name) {
			continue
		}
		latest[ev.Reason] = Item{Cluster: cluster, Resource: *ev}
	}
	s.mu.RUnlock()
	out := make([]Item, 0, len(latest))
	for _, it := range latest {
		out = append(out, it)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].LastSeen != out[j].LastSeen {
			return out[i].LastSeen > out[j].LastSeen
		}
		return out[i].Name < out[j].Name
	})
	// Asked outside the lock, once per namespace: allow may ask the
	// cluster.
	asked := map[string]bool{}
	kept := out[:0]
	for _, it := range out {
		ok, known := asked[it.Namespace]
		if !known {
			ok = allow("events", it.Namespace)
			asked[it.Namespace] = ok
		}
		if ok {
			kept = append(kept, it)
		}
		if len(kept) == MaxEventsPerObject {
			break
		}
	}
	return kept
}
