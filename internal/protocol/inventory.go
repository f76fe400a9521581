package protocol

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// The inventory stream (SPEC section 5). After its hello is welcomed, the
// agent opens one more stream and writes Updates on it, framed like control
// messages: first a full snapshot, then changes. The hub never writes on it.

// Limits on what one inventory message may hold, so a hub's memory per
// cluster stays bounded by what the agent is allowed to send.
const (
	// MaxUpdateItems bounds the upserts and deletes in one Update.
	MaxUpdateItems = 5000
	// maxField bounds a Resource's kind, name and namespace, and a kind
	// state's fields; MaxMessageSize bounds the rest.
	maxField = 4096
)

// Update is one message on the inventory stream.
type Update struct {
	// Snapshot starts a full snapshot: Upserts in this and the following
	// Updates, up to one with Complete, are everything there is. The hub
	// swaps its state for the snapshot only once it is complete.
	Snapshot bool `json:"snapshot,omitempty"`
	// Complete ends a snapshot.
	Complete bool `json:"complete,omitempty"`
	// Kinds, when set, is what the agent watches now, and what it can't.
	Kinds []KindState `json:"kinds,omitempty"`
	// GatewayTieBreaker is the agent's TETHER_ISTIO_GATEWAY_TIE_BREAKER
	// ("namespace/name"), sent with each snapshot.
	GatewayTieBreaker string `json:"gatewayTieBreaker,omitempty"`

	Upserts []Resource    `json:"upserts,omitempty"`
	Deletes []ResourceRef `json:"deletes,omitempty"`
}

// KindState is one kind the agent was asked to watch: Error is empty while
// it watches it, and says why not otherwise (the API doesn't exist, the
// service account may not list it). Namespace is set for an error in one
// namespace of TETHER_ALLOWED_NAMESPACES.
type KindState struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Error     string `json:"error,omitempty"`
	// Missing is true when the API doesn't exist in the cluster.
	Missing bool `json:"missing,omitempty"`
	// Group, Resource and Namespaced describe a kind of the agent's
	// TETHER_INVENTORY_KINDS_EXTRA, which the hub doesn't know: what to
	// ask the cluster when it checks whether a person may list it.
	// Namespaced is as discovery last said. Unset for the default kinds.
	Group      string `json:"group,omitempty"`
	Resource   string `json:"resource,omitempty"`
	Namespaced bool   `json:"namespaced,omitempty"`
}

// ResourceRef names one object.
type ResourceRef struct {
	Kind      string `json:"kind"` // plural resource name, like "pods"
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

// Resource is one object of the cluster, summarized: never the whole object.
type Resource struct {
	ResourceRef
	Labels map[string]string `json:"labels,omitempty"`
	Owner  string            `json:"owner,omitempty"` // "Kind/name" of the controller
	Phase  string            `json:"phase,omitempty"`
	// Ready is the object's readiness as people read it: a pod running
	// and ready (or done), a workload with all its replicas ready, a node
	// whose Ready condition is true, an application synced and healthy.
	Ready bool `json:"ready"`
	// Replicas is "ready/desired" for workloads.
	Replicas   string      `json:"replicas,omitempty"`
	Conditions []Condition `json:"conditions,omitempty"`
	Images     []string    `json:"images,omitempty"`
	Restarts   int32       `json:"restarts,omitempty"`
	// Version is a node's kubelet version.
	Version string `json:"version,omitempty"`
	// Sync and Health are an Argo CD application's status.
	Sync   string `json:"sync,omitempty"`
	Health string `json:"health,omitempty"`
	// Hosts are an Istio gateway's or virtual service's, or an ingress's,
	// hosts.
	Hosts []string `json:"hosts,omitempty"`
	// Gateways are the Istio gateways a virtual service is bound to.
	Gateways []string `json:"gateways,omitempty"`
	// Quota is a resource quota's use, "resource used/hard" each, sorted.
	Quota []string `json:"quota,omitempty"`
	// Message says why, in the object's words: an Argo Workflow's or a
	// SparkApplication's status message, an event's.
	Message string `json:"message,omitempty"`
	// Object is the "Kind/name" an event is about (in the event's
	// namespace), Reason its reason, Count how often it happened, and
	// LastSeen when last (RFC 3339).
	Object   string `json:"object,omitempty"`
	Reason   string `json:"reason,omitempty"`
	Count    int32  `json:"count,omitempty"`
	LastSeen string `json:"lastSeen,omitempty"`
}

// Condition is one status condition, without its timestamps.
type Condition struct {
	Type    string `json:"type"`
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// Clip cuts s, text for people, to at most n bytes, on a character's
// boundary, and marks the cut with "…". The agent clips what it sends, and
// the hub what it takes, to the limits here.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n-len("…")], "") + "…"
}

// Validate checks that u is within the limits and every object is named.
// A kind's error over the limit is cut to it, not refused: it is text for
// people, and refusing it would refuse the cluster's whole inventory.
func (u *Update) Validate() error {
	if n := len(u.Upserts) + len(u.Deletes); n > MaxUpdateItems {
		return fmt.Errorf("protocol: inventory update with %d objects, over %d", n, MaxUpdateItems)
	}
	for i := range u.Upserts {
		if err := u.Upserts[i].ResourceRef.validate(); err != nil {
			return err
		}
	}
	for i := range u.Deletes {
		if err := u.Deletes[i].validate(); err != nil {
			return err
		}
	}
	for i := range u.Kinds {
		k := &u.Kinds[i]
		if k.Kind == "" || len(k.Kind) > maxField || len(k.Namespace) > maxField || len(k.Group) > maxField || len(k.Resource) > maxField {
			return fmt.Errorf("protocol: inventory kind state %q is malformed", k.Kind)
		}
		k.Error = Clip(k.Error, maxField)
	}
	return nil
}

func (r ResourceRef) validate() error {
	if r.Kind == "" || r.Name == "" {
		return fmt.Errorf("protocol: inventory object without kind or name (%q %q)", r.Kind, r.Name)
	}
	if len(r.Kind) > maxField || len(r.Name) > maxField || len(r.Namespace) > maxField {
		return fmt.Errorf("protocol: inventory object %q has a field over %d bytes", r.Name, maxField)
	}
	return nil
}

// WriteUpdate sends u as one frame. An Update over MaxMessageSize is an
// error wrapping ErrTooLarge: the sender splits it.
func WriteUpdate(w io.Writer, u *Update) error {
	return writeFrame(w, "inventory update", u)
}

// ReadUpdate reads one frame written by WriteUpdate and validates it.
func ReadUpdate(r io.Reader) (*Update, error) {
	body, err := readFrame(r)
	if err != nil {
		return nil, err
	}
	return DecodeUpdate(body)
}

// DecodeUpdate parses and validates one inventory update's JSON.
func DecodeUpdate(body []byte) (*Update, error) {
	u := new(Update)
	if err := json.Unmarshal(body, u); err != nil {
		return nil, fmt.Errorf("protocol: decode inventory update: %w", err)
	}
	if err := u.Validate(); err != nil {
		return nil, err
	}
	return u, nil
}
