// Package replicas is how hub replicas find and trust each other (issue 35, SPEC section 8):
// each holds a coordination.k8s.io/v1 Lease in the coordination namespace that names it, says
// where its peers reach it and publishes its peer certificate, signed with the hub's shared
// token signing key. It exists so that the peer link (the claims of clusters, forwarding)
// needs to know only who the live members are and how to speak TLS to them. Decision 032.
package replicas

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tetherhq/tether/internal/clock"
	"github.com/tetherhq/tether/internal/logging"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Defaults of Config's durations, decision 032: a dead replica is dropped within 15 s (the
// issue's bound), and a live one writes once every 5 s (the issue allows one per 2 s).
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewInterval = 5 * time.Second
)

// The settings the errors name: Config's fields come from them.
const (
	settingName      = "TETHER_REPLICA_NAME"
	settingNamespace = "TETHER_COORDINATION_NAMESPACE"
	settingPeerAddr  = "TETHER_PEER_ADDR"
	settingKeys      = "TETHER_TOKEN_SIGNING_KEY_FILE"
)

var (
	// ErrNameTaken is Join's error when another live replica holds the name's Lease.
	ErrNameTaken = errors.New("replica name taken")
	// ErrNameLost is Err's when another replica took this one's Lease: it must stop.
	ErrNameLost = errors.New("replica name lost")
	// ErrClosed is Err's after Close.
	ErrClosed = errors.New("replicas closed")
)

// Config is what Join needs. The hub builds it from its settings; no field is read from the
// environment here.
type Config struct {
	Logger *slog.Logger
	// Client talks to the API server of the cluster the hub runs in (ClientFromEnv).
	Client *Client
	// Namespace holds the Leases: TETHER_COORDINATION_NAMESPACE.
	Namespace string
	// Name is this replica's, unique among them: TETHER_REPLICA_NAME.
	Name string
	// PeerAddr is host:port where the other replicas reach this one: TETHER_PEER_ADDR.
	PeerAddr string
	// SigningKeys are TETHER_TOKEN_SIGNING_KEY_FILE's (auth.ReadSigningKeys): the first signs
	// this replica's Lease, any verifies another's.
	SigningKeys []ed25519.PrivateKey
	// LeaseDuration is how long a Lease seen unchanged keeps its replica a member; zero means
	// DefaultLeaseDuration. RenewInterval is how often a replica renews its own; zero means
	// DefaultRenewInterval. Every replica must use the same.
	LeaseDuration, RenewInterval time.Duration
	// Clock is nil for the real one.
	Clock clock.Clock
}

// Member is a replica as its signed Lease publishes it.
type Member struct {
	Name, PeerAddr string
	Cert           []byte // DER of the certificate it presents on the peer link
}

func (m Member) clone() Member {
	m.Cert = bytes.Clone(m.Cert)
	return m
}

func (m Member) equal(o Member) bool {
	return m.Name == o.Name && m.PeerAddr == o.PeerAddr && bytes.Equal(m.Cert, o.Cert)
}

// Replicas is this replica's membership: its own Lease, held and renewed, and the live,
// verified Leases of the others. Close releases it.
type Replicas struct {
	log       *slog.Logger
	client    *Client
	leases    leaseClient
	ns        string
	leaseName string
	holder    string // spec.holderIdentity: name/instance
	self      identity
	ann       map[string]string
	duration  time.Duration
	renew     time.Duration
	clock     clock.Clock
	keys      []ed25519.PublicKey
	limiter   *logging.Limiter

	changed chan struct{} // buffered 1
	done    chan struct{} // closed by finish

	stop        context.CancelFunc // ends the informer and the expiry loop
	wg          sync.WaitGroup     // the informer and the expiry loop
	renewCancel context.CancelFunc
	renewDone   chan struct{}
	wake        chan struct{} // buffered 1: the expiry loop recomputes the members
	closeOnce   sync.Once
	closeErr    error

	mu       sync.Mutex // guards the following
	own      *coordinationv1.Lease
	seen     map[string]*observed // by Lease name, this replica's included
	members  []Member
	err      error // set once, by finish
	timer    clock.Timer
	lastList error // the informer's last failure to list or watch, for Join's error
}

// Join takes this replica's Lease, waiting out a previous holder of the name that stopped
// renewing it, and returns once it holds the Lease and knows the members. It fails with
// ErrNameTaken if another replica keeps renewing the name's Lease for LeaseDuration plus a
// renewal. It waits while the API server refuses to list Leases: give ctx a deadline.
func Join(ctx context.Context, cfg Config) (*Replicas, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	r := &Replicas{
		log:       cfg.Logger,
		client:    cfg.Client,
		leases:    cfg.Client.leases(cfg.Namespace),
		ns:        cfg.Namespace,
		leaseName: LeasePrefix + cfg.Name,
		duration:  cfg.LeaseDuration,
		renew:     cfg.RenewInterval,
		clock:     cfg.Clock,
		limiter:   logging.NewLimiter(time.Minute),
		changed:   make(chan struct{}, 1),
		done:      make(chan struct{}),
		wake:      make(chan struct{}, 1),
		seen:      map[string]*observed{},
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if r.duration == 0 {
		r.duration = DefaultLeaseDuration
	}
	if r.renew == 0 {
		r.renew = DefaultRenewInterval
	}
	if r.clock == nil {
		r.clock = clock.Real()
	}
	if r.renew >= r.duration {
		return nil, fmt.Errorf("join replicas: renew interval %s must be shorter than the lease duration %s", r.renew, r.duration)
	}
	for _, k := range cfg.SigningKeys {
		r.keys = append(r.keys, k.Public().(ed25519.PublicKey))
	}
	instance := make([]byte, 8)
	if _, err := rand.Read(instance); err != nil {
		return nil, fmt.Errorf("join replicas: %w", err)
	}
	r.holder = cfg.Name + "/" + hex.EncodeToString(instance)
	var err error
	if r.self, err = newIdentity(cfg.Name, cfg.PeerAddr, r.clock.Now()); err != nil {
		return nil, fmt.Errorf("join replicas: %w", err)
	}
	r.ann = annotations(r.self.member, cfg.SigningKeys[0])

	own, err := r.acquire(ctx)
	if err != nil {
		return nil, err
	}
	r.own = own
	renewCtx, renewCancel := context.WithCancel(context.WithoutCancel(ctx))
	r.renewCancel, r.renewDone = renewCancel, make(chan struct{})
	go r.renewLoop(renewCtx)

	synced, err := r.startWatch(context.WithoutCancel(ctx))
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("join replicas: %w", err)
	}
	select {
	case <-synced:
	case <-ctx.Done():
		r.mu.Lock()
		listErr := r.lastList
		r.mu.Unlock()
		r.Close()
		if listErr != nil {
			return nil, fmt.Errorf("join replicas: list Leases in namespace %s: %w", r.ns, listErr)
		}
		return nil, fmt.Errorf("join replicas: list Leases in namespace %s: %w", r.ns, ctx.Err())
	}
	r.mu.Lock()
	r.recomputeLocked()
	r.mu.Unlock()
	r.log.Info("joined the hub replicas", "replica", cfg.Name, "namespace", r.ns, "lease", r.leaseName, "members", len(r.Members()))
	return r, nil
}

func (cfg Config) check() error {
	if cfg.Client == nil {
		return errors.New("join replicas: no Kubernetes client")
	}
	if cfg.Namespace == "" {
		return fmt.Errorf("%s is empty: name the namespace where the hub replicas hold their Leases", settingNamespace)
	}
	if errs := validation.IsDNS1123Label(cfg.Namespace); len(errs) > 0 {
		return fmt.Errorf("%s %q is not a namespace name: %s", settingNamespace, cfg.Namespace, strings.Join(errs, "; "))
	}
	if cfg.Name == "" {
		return fmt.Errorf("%s is empty: each hub replica needs a name of its own", settingName)
	}
	if errs := validation.IsDNS1123Subdomain(LeasePrefix + cfg.Name); len(errs) > 0 {
		return fmt.Errorf("%s %q can't name a Lease %s%s: %s", settingName, cfg.Name, LeasePrefix, cfg.Name, strings.Join(errs, "; "))
	}
	if err := checkAddr(cfg.PeerAddr); err != nil {
		return fmt.Errorf("%s must be host:port where the other replicas reach this one: %w", settingPeerAddr, err)
	}
	if len(cfg.SigningKeys) == 0 {
		return fmt.Errorf("%s is required for hub replicas: they sign their peer identities with it", settingKeys)
	}
	if cfg.LeaseDuration < 0 || cfg.RenewInterval < 0 {
		return fmt.Errorf("join replicas: negative lease duration %s or renew interval %s", cfg.LeaseDuration, cfg.RenewInterval)
	}
	return nil
}

// Self is this replica as its Lease publishes it.
func (r *Replicas) Self() Member { return r.self.member.clone() }

// Members are the other replicas whose Leases are signed and live, sorted by name.
func (r *Replicas) Members() []Member {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Member, len(r.members))
	for i, m := range r.members {
		out[i] = m.clone()
	}
	return out
}

// Member is the live, verified replica called name, other than this one.
func (r *Replicas) Member(name string) (Member, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m, ok := r.memberLocked(name)
	return m.clone(), ok
}

func (r *Replicas) memberLocked(name string) (Member, bool) {
	i, ok := slices.BinarySearchFunc(r.members, name, func(m Member, name string) int { return strings.Compare(m.Name, name) })
	if !ok {
		return Member{}, false
	}
	return r.members[i], true
}

// Changed gets a value whenever Members changes. It holds one at most: a reader that was away
// reads Members again once.
func (r *Replicas) Changed() <-chan struct{} { return r.changed }

// Done is closed when this replica stops being one: it lost its name (Err is ErrNameLost), or
// was closed (ErrClosed).
func (r *Replicas) Done() <-chan struct{} { return r.done }

// Err says why Done is closed; nil while it isn't.
func (r *Replicas) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// finish closes Done with err, once.
func (r *Replicas) finish(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return
	}
	r.err = err
	close(r.done)
}

// Close deletes this replica's Lease, so the others drop it at once rather than after the
// lease duration, then stops watching and waits for its goroutines. It may be called twice.
func (r *Replicas) Close() error {
	r.closeOnce.Do(func() {
		r.renewCancel()
		<-r.renewDone
		r.closeErr = r.release()
		if r.stop != nil {
			r.stop()
		}
		r.wg.Wait()
		r.mu.Lock()
		if r.timer != nil {
			r.timer.Stop()
		}
		r.mu.Unlock()
		r.finish(ErrClosed)
	})
	return r.closeErr
}
