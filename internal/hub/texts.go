package hub

import "strings"

// texts keeps one copy of each status text the hub holds. Thousands of
// clusters whose agents can't reach their API servers for one reason, or
// whose API servers run one version, each kept a copy of their own: in
// their status, their history, and in each claim of another replica's
// cluster, about 300 bytes a cluster where most say the same (issue 35).
// Past maxTextBytes it starts afresh, so that texts no cluster says any
// more are not kept for ever. Guarded by Hub.mu.
type texts struct {
	m     map[string]string
	bytes int
}

// maxTextBytes bounds what texts keeps that no cluster may say any more.
const maxTextBytes = 256 << 10

// of returns s, or the equal text kept already.
func (t *texts) of(s string) string {
	if s == "" {
		return s
	}
	if kept, ok := t.m[s]; ok {
		return kept
	}
	if t.m == nil || t.bytes+len(s) > maxTextBytes {
		t.m, t.bytes = map[string]string{}, 0
	}
	s = strings.Clone(s) // not a part of a larger string, kept whole
	t.m[s] = s
	t.bytes += len(s)
	return s
}

// status makes st's texts the kept copies.
func (t *texts) status(st *ClusterStatus) {
	st.Status = t.of(st.Status)
	st.Message = t.of(st.Message)
	st.KubernetesVersion = t.of(st.KubernetesVersion)
	st.AgentVersion = t.of(st.AgentVersion)
	st.Ceiling = t.of(st.Ceiling)
}
