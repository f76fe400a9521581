package server

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/fleet"
	"github.com/tetherhq/tether/internal/hub"
	"github.com/tetherhq/tether/internal/inventory/store"
	"github.com/tetherhq/tether/internal/kubeproxy"
	"github.com/tetherhq/tether/internal/logging"
	"github.com/tetherhq/tether/internal/web"
)

// Options are the hub's settings, as SPEC section 2 names them.
type Options struct {
	Addr            string
	PublicURL       *url.URL
	TLSCertFile     string
	TLSKeyFile      string
	BasePath        string
	Heartbeat       time.Duration
	ReconnectSpread time.Duration
	ShutdownGrace   time.Duration
	MetricsAddr     string // "" when turned off
	LogFormat       string
	AuditFile       string // "-" is standard output
	Fleet           fleet.Config
	// Clusters are the clusters the hub reaches itself
	// (TETHER_FLEET_CLUSTERS).
	Clusters []fleet.Cluster
	Auth     auth.Config
	// AccessReviewsPerQuery and AccessReviewsPerPerson bound the access
	// reviews of inventory queries (TETHER_ACCESS_REVIEWS_PER_QUERY,
	// TETHER_ACCESS_REVIEWS_PER_PERSON): Config's fields of those names.
	AccessReviewsPerQuery, AccessReviewsPerPerson int
	// Limits bound what one person holds open at once on one cluster
	// (TETHER_MAX_REQUESTS_PER_PERSON and its like).
	Limits auth.Limits
	// InventoryMaxBytes bounds every cluster's inventory together, in bytes
	// of the hub's heap (TETHER_INVENTORY_MAX_BYTES).
	InventoryMaxBytes int
	// MaxStreamsPerAgent bounds the streams open through one agent for
	// people's requests (TETHER_MAX_STREAMS_PER_AGENT).
	MaxStreamsPerAgent int
	// Coordination is how replicas of the hub coordinate (SPEC section 8,
	// TETHER_COORDINATION): CoordinationNone, one hub with its state in
	// memory, or CoordinationKubernetes.
	Coordination string
	// Recordings are the session recordings' settings (recordings.go).
	Recordings RecordingOptions
	// Replica says who this replica is and where the others reach it;
	// read only with CoordinationKubernetes.
	Replica ReplicaOptions
	// DrainDelay is how long a stopping hub goes on taking requests, its
	// /readyz answering 503, so load balancers take it out first
	// (TETHER_DRAIN_DELAY_SECONDS).
	DrainDelay time.Duration
	// Listener, when set, is used instead of listening on Addr: for tests
	// and `tether dev`, which pick their address first.
	Listener net.Listener
}

// The values of TETHER_COORDINATION.
const (
	CoordinationNone       = "none"
	CoordinationKubernetes = "kubernetes"
)

// ReplicaOptions are the settings of a replica under CoordinationKubernetes.
type ReplicaOptions struct {
	// Namespace holds the replicas' Leases (TETHER_COORDINATION_NAMESPACE;
	// by default the pod's own).
	Namespace string
	// Name is this replica's (TETHER_REPLICA_NAME; by default the host
	// name, which is the pod's).
	Name string
	// PeerAddr is where the other replicas reach this one
	// (TETHER_PEER_ADDR), and PeerListenAddr where it listens for them
	// (TETHER_PEER_LISTEN_ADDR).
	PeerAddr, PeerListenAddr string
	// Kubeconfig is KUBECONFIG: the API server to coordinate through when
	// set, else the pod's own (in-cluster).
	Kubeconfig string
}

// podNamespaceFile is where a pod finds its namespace.
const podNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// OptionsFromEnv reads and checks the hub's settings. Each error is one line
// that names the setting and says what it must be. publicURLRequired is
// false for `tether dev`, which knows its own address.
func OptionsFromEnv(getenv func(string) string, publicURLRequired bool) (Options, error) {
	o := Options{
		Addr:        orDefault(getenv("TETHER_ADDR"), ":8080"),
		TLSCertFile: getenv("TETHER_TLS_CERT_FILE"),
		TLSKeyFile:  getenv("TETHER_TLS_KEY_FILE"),
		BasePath:    orDefault(getenv("TETHER_BASE_PATH"), "/"),
		MetricsAddr: orDefault(getenv("TETHER_METRICS_ADDR"), ":9090"),
		LogFormat:   orDefault(getenv("TETHER_LOG_FORMAT"), "text"),
		AuditFile:   orDefault(getenv("TETHER_AUDIT_FILE"), "-"),
		Fleet: fleet.Config{
			Agents:     getenv("TETHER_FLEET_AGENTS"),
			AgentsFile: getenv("TETHER_FLEET_AGENTS_FILE"),
		},
	}
	if _, _, err := net.SplitHostPort(o.Addr); err != nil {
		return Options{}, fmt.Errorf("TETHER_ADDR must be an address like :8080, not %q", o.Addr)
	}
	if raw := getenv(fleet.SettingClusters); strings.TrimSpace(raw) != "" {
		clusters, err := fleet.ParseClusters([]byte(raw))
		if err != nil {
			return Options{}, err
		}
		o.Clusters = clusters
	}
	if raw := strings.TrimSpace(getenv("TETHER_PUBLIC_URL")); raw != "" {
		u, err := url.Parse(raw)
		raw = logging.RedactURL(raw) // the errors quote it, without its password
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return Options{}, fmt.Errorf("TETHER_PUBLIC_URL must be the hub's address as people open it, like https://tether.example.com, not %q", raw)
		}
		if p := u.Port(); p != "" {
			if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
				return Options{}, fmt.Errorf("TETHER_PUBLIC_URL must be the hub's address, with a port from 1 to 65535 if any, like https://tether.example.com:8443, not %q", raw)
			}
		}
		if u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
			// Kubeconfigs append paths to it, and sign-in compares origins.
			return Options{}, fmt.Errorf("TETHER_PUBLIC_URL must be the hub's address without a user, query or fragment, like https://tether.example.com/tether, not %q", raw)
		}
		u.Path = strings.TrimRight(u.Path, "/")
		o.PublicURL = u
	} else if publicURLRequired {
		return Options{}, errors.New("TETHER_PUBLIC_URL must be set to the hub's address as people open it, like https://tether.example.com: kubeconfigs and links use it")
	}
	if (o.TLSCertFile == "") != (o.TLSKeyFile == "") {
		return Options{}, errors.New("TETHER_TLS_CERT_FILE and TETHER_TLS_KEY_FILE must be set together, or neither for plain HTTP behind an ingress")
	}
	if !web.ValidBasePath(o.BasePath) {
		return Options{}, fmt.Errorf("TETHER_BASE_PATH must be a path starting with /, like /tether or /k8s/hub: segments of letters, digits, '-', '.', '_' and '~', not %q", o.BasePath)
	}
	var err error
	if o.Heartbeat, err = seconds(getenv, "TETHER_HEARTBEAT_SECONDS", 30, 1); err != nil {
		return Options{}, err
	}
	if o.ReconnectSpread, err = seconds(getenv, "TETHER_RECONNECT_SPREAD_SECONDS", 10, 0); err != nil {
		return Options{}, err
	}
	if o.ShutdownGrace, err = seconds(getenv, "TETHER_SHUTDOWN_GRACE_SECONDS", 30, 0); err != nil {
		return Options{}, err
	}
	if o.AccessReviewsPerQuery, err = count(getenv, "TETHER_ACCESS_REVIEWS_PER_QUERY", web.DefaultReviewsPerQuery); err != nil {
		return Options{}, err
	}
	if o.AccessReviewsPerPerson, err = count(getenv, "TETHER_ACCESS_REVIEWS_PER_PERSON", web.DefaultReviewsPerPerson); err != nil {
		return Options{}, err
	}
	if o.InventoryMaxBytes, err = byteSize(getenv, "TETHER_INVENTORY_MAX_BYTES", store.DefaultMaxBytes, 16<<20); err != nil {
		return Options{}, err
	}
	if o.MaxStreamsPerAgent, err = count(getenv, "TETHER_MAX_STREAMS_PER_AGENT", hub.DefaultMaxStreamsPerAgent); err != nil {
		return Options{}, err
	}
	if o.MetricsAddr == "0" {
		o.MetricsAddr = ""
	} else if _, _, err := net.SplitHostPort(o.MetricsAddr); err != nil {
		return Options{}, fmt.Errorf("TETHER_METRICS_ADDR must be an address like :9090, or 0 to turn it off, not %q", o.MetricsAddr)
	}
	if o.LogFormat != "text" && o.LogFormat != "json" {
		return Options{}, fmt.Errorf("TETHER_LOG_FORMAT must be text or json, not %q", o.LogFormat)
	}
	for _, l := range []struct {
		v       *int
		setting string
		def     int
	}{
		{&o.Limits.Requests, kubeproxy.SettingMaxRequests, kubeproxy.DefaultMaxRequests},
		{&o.Limits.Watches, kubeproxy.SettingMaxWatches, kubeproxy.DefaultMaxWatches},
		{&o.Limits.Sessions, kubeproxy.SettingMaxSessions, kubeproxy.DefaultMaxSessions},
	} {
		if *l.v, err = count(getenv, l.setting, l.def); err != nil {
			return Options{}, err
		}
	}
	if o.Auth, err = auth.OptionsFromEnv(getenv); err != nil {
		return Options{}, err
	}
	if o.DrainDelay, err = seconds(getenv, "TETHER_DRAIN_DELAY_SECONDS", 0, 0); err != nil {
		return Options{}, err
	}
	if o.Recordings, err = readRecordings(getenv); err != nil {
		return Options{}, err
	}
	if err := o.readCoordination(getenv); err != nil {
		return Options{}, err
	}
	if publicURLRequired && !o.Auth.Configured() {
		// Only `tether dev` may start without a way for people to sign in.
		return Options{}, auth.ErrNothingConfigured
	}
	if o.PublicURL != nil {
		o.Auth.HubURL = o.PublicURL.String()
	}
	return o, nil
}

// maxSeconds bounds a setting in seconds: a year.
const maxSeconds = 365 * 24 * 60 * 60

func seconds(getenv func(string) string, name string, def, least int) (time.Duration, error) {
	v := strings.TrimSpace(getenv(name))
	if v == "" {
		return time.Duration(def) * time.Second, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < least {
		return 0, fmt.Errorf("%s must be a whole number of seconds, at least %d, not %q", name, least, v)
	}
	if n > maxSeconds {
		// More would overflow a time.Duration into a negative one.
		return 0, fmt.Errorf("%s must be at most %d seconds (a year), not %q", name, maxSeconds, v)
	}
	return time.Duration(n) * time.Second, nil
}

// count reads a setting that is a whole number from 1 to a million.
func count(getenv func(string) string, name string, def int) (int, error) {
	return whole(getenv, name, def, 1, 1_000_000)
}

// whole reads a whole-number setting from least to most, def when unset.
func whole(getenv func(string) string, name string, def, least, most int) (int, error) {
	v := strings.TrimSpace(getenv(name))
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < least || n > most {
		return 0, fmt.Errorf("%s must be a whole number from %d to %d, not %q", name, least, most, v)
	}
	return n, nil
}

// byteSize reads a setting in bytes: a whole number, or one with Ki, Mi or
// Gi after it, as Kubernetes writes memory (256Mi).
func byteSize(getenv func(string) string, name string, def, least int) (int, error) {
	v := strings.TrimSpace(getenv(name))
	if v == "" {
		return def, nil
	}
	digits, unit := v, 1
	for suffix, u := range map[string]int{"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30} {
		if d, ok := strings.CutSuffix(v, suffix); ok {
			digits, unit = d, u
		}
	}
	n, err := strconv.Atoi(digits)
	if err != nil || n < 0 || n > (1<<50)/unit || n*unit < least {
		return 0, fmt.Errorf("%s must be a number of bytes, like 512Mi or 536870912, of at least %dMi, not %q", name, least>>20, v)
	}
	return n * unit, nil
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// readCoordination reads TETHER_COORDINATION and, for kubernetes, the
// replica's settings (SPEC section 8).
func (o *Options) readCoordination(getenv func(string) string) error {
	o.Coordination = orDefault(strings.TrimSpace(getenv("TETHER_COORDINATION")), CoordinationNone)
	switch o.Coordination {
	case CoordinationNone:
		return nil
	case CoordinationKubernetes:
	default:
		return fmt.Errorf("TETHER_COORDINATION must be none (one hub) or kubernetes (replicas coordinating through the Kubernetes API), not %q", o.Coordination)
	}
	if o.Auth.SigningKeyFile == "" {
		return errors.New("TETHER_COORDINATION=kubernetes needs TETHER_TOKEN_SIGNING_KEY_FILE, the same on every replica: each accepts the tokens the others sign, and proves with it that it is a replica")
	}
	r := ReplicaOptions{
		Namespace:      strings.TrimSpace(getenv("TETHER_COORDINATION_NAMESPACE")),
		Name:           strings.TrimSpace(getenv("TETHER_REPLICA_NAME")),
		PeerAddr:       strings.TrimSpace(getenv("TETHER_PEER_ADDR")),
		PeerListenAddr: orDefault(strings.TrimSpace(getenv("TETHER_PEER_LISTEN_ADDR")), ":8444"),
		Kubeconfig:     getenv("KUBECONFIG"),
	}
	if r.Namespace == "" {
		b, err := os.ReadFile(podNamespaceFile)
		if err != nil {
			return errors.New("TETHER_COORDINATION_NAMESPACE must name the namespace of the replicas' Leases: this hub runs outside a pod, so it has no namespace of its own")
		}
		r.Namespace = strings.TrimSpace(string(b))
	}
	if errs := validation.IsDNS1123Label(r.Namespace); len(errs) > 0 {
		return fmt.Errorf("TETHER_COORDINATION_NAMESPACE must be a namespace's name, not %q", r.Namespace)
	}
	if r.Name == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("TETHER_REPLICA_NAME is not set, and the host name can't be read: %w", err)
		}
		r.Name = h
	}
	if errs := validation.IsDNS1123Subdomain(LeasePrefix + r.Name); len(errs) > 0 || len(r.Name) > 63 {
		return fmt.Errorf("TETHER_REPLICA_NAME must be a DNS name of at most 63 characters, like a pod's, not %q", r.Name)
	}
	if r.PeerAddr == "" {
		return errors.New("TETHER_PEER_ADDR must be set, to the host:port where the other replicas reach this one (the chart sets it from the pod's IP)")
	}
	if _, port, err := net.SplitHostPort(r.PeerAddr); err != nil || port == "" {
		return fmt.Errorf("TETHER_PEER_ADDR must be a host:port, like 10.0.3.7:8444, not %q", r.PeerAddr)
	}
	if _, _, err := net.SplitHostPort(r.PeerListenAddr); err != nil {
		return fmt.Errorf("TETHER_PEER_LISTEN_ADDR must be an address like :8444, not %q", r.PeerListenAddr)
	}
	o.Replica = r
	return nil
}

// LeasePrefix starts the name of each replica's Lease.
const LeasePrefix = "tether-replica-"
