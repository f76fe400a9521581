package fleet

import (
	"crypto/subtle"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetherhq/tether/internal/listfile"
	"github.com/tetherhq/tether/internal/protocol"
)

// The settings the agents list comes from.
const (
	SettingAgents     = "TETHER_FLEET_AGENTS"
	SettingAgentsFile = "TETHER_FLEET_AGENTS_FILE"
)

var agentFields = []string{"name", "tokenSha256", "token", "labels", "groups", "forwardToken", "caSha256"}

// Agent is one entry of the agents list: a cluster whose agent may connect. Agents handed out by
// Agents share their maps and slices with the list, so they must not be modified.
type Agent struct {
	// Name is the cluster's name, a DNS label.
	Name string
	// TokenHashes are the SHA-256 of the tokens the agent may connect with: one, or two while a
	// token is rotated.
	TokenHashes []listfile.Hash
	Labels      map[string]string
	// Groups says who may see the cluster.
	Groups Groups
	// ForwardToken sends each person's own bearer token to the cluster instead of impersonating
	// them.
	ForwardToken bool
	// CASHA256 is the SHA-256 (64 lower-case hex) of the PEM bytes of the ca.crt the agent must
	// send, or "" when any CA will do.
	CASHA256 string
}

// Groups says who may see a cluster. The zero value lets no one: a cluster is only shown to
// everyone when the list says so by leaving its groups out.
type Groups struct {
	// Everyone is true when the entry has no groups field: everyone signed in may see the cluster.
	Everyone bool
	// Names are the groups that may see it when Everyone is false; empty for "groups: []".
	Names []string
}

// Allows reports whether someone in the given groups may see the cluster.
func (g Groups) Allows(groups []string) bool {
	if g.Everyone {
		return true
	}
	for _, n := range g.Names {
		if slices.Contains(groups, n) {
			return true
		}
	}
	return false
}

func (g Groups) equal(o Groups) bool {
	return g.Everyone == o.Everyone && slices.Equal(g.Names, o.Names)
}

// AcceptsHash reports, in constant time, whether a token with SHA-256 h may connect as a.
func (a Agent) AcceptsHash(h listfile.Hash) bool {
	// Always two comparisons, so the time taken says nothing about rotation.
	want := [2]listfile.Hash{}
	copy(want[:], a.TokenHashes)
	m0 := subtle.ConstantTimeCompare(h[:], want[0][:]) & boolInt(len(a.TokenHashes) >= 1)
	m1 := subtle.ConstantTimeCompare(h[:], want[1][:]) & boolInt(len(a.TokenHashes) >= 2)
	return m0|m1 == 1
}

// CAMatches reports whether caPEM, the ca.crt an agent sent, is the one its entry pins; true
// when the entry pins none.
func (a Agent) CAMatches(caPEM []byte) bool { return a.AcceptsCA(listfile.HashToken(string(caPEM))) }

// AcceptsCA is CAMatches for a ca.crt whose SHA-256 is sum.
func (a Agent) AcceptsCA(sum listfile.Hash) bool {
	if a.CASHA256 == "" {
		return true
	}
	want, err := listfile.ParseHash(a.CASHA256)
	return err == nil && equalHash(sum, want)
}

func (a Agent) equal(b Agent) bool {
	return a.Name == b.Name && slices.Equal(a.TokenHashes, b.TokenHashes) && maps.Equal(a.Labels, b.Labels) &&
		a.Groups.equal(b.Groups) && a.ForwardToken == b.ForwardToken && a.CASHA256 == b.CASHA256
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// ParseAgents reads an agents list; setting is what its errors name (SettingAgents or
// SettingAgentsFile). See the package doc for the format.
func ParseAgents(setting string, data []byte) ([]Agent, error) {
	spec := listfile.ListSpec{Setting: setting, Fields: agentFields, Example: "private-eu"}
	list := []Agent{}
	err := listfile.ParseList(spec, data, func(e *listfile.Entry) error {
		a := Agent{Name: e.Name()}
		if protocol.CheckName(a.Name) != nil {
			long := ""
			if n := len(a.Name); n > 63 {
				long = fmt.Sprintf(" (it has %d)", n)
			}
			return e.Errorf("needs a name that is a DNS label: %s%s.", protocol.NameRule, long)
		}
		var err error
		if a.TokenHashes, err = e.TokenHashes(); err != nil {
			return err
		}
		if a.Labels, a.Groups, a.ForwardToken, err = shown(e); err != nil {
			return err
		}
		ca, pinned, err := e.SHA256("caSha256", "make it with: sha256sum ca.crt")
		if err != nil {
			return err
		}
		if pinned {
			a.CASHA256 = ca.String()
		}
		list = append(list, a)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return list, nil
}

// parseWithExtra parses an agents list and adds extra to it.
func parseWithExtra(setting string, data []byte, extra []Agent) ([]Agent, error) {
	list, err := ParseAgents(setting, data)
	if err != nil {
		return nil, err
	}
	for i, a := range list {
		if slices.ContainsFunc(extra, func(x Agent) bool { return x.Name == a.Name }) {
			return nil, listfile.EntryErrorf(setting, i, a.Name, "has the name of a cluster in %s; names must be unique.", SettingClusters)
		}
	}
	return append(list, extra...), nil
}

// shown reads the fields both lists have for how a cluster is shown and
// reached: labels, groups and forwardToken.
func shown(e *listfile.Entry) (labels map[string]string, groups Groups, forwardToken bool, err error) {
	if labels, _, err = e.StringMap("labels"); err != nil {
		return nil, Groups{}, false, err
	}
	if e.IsNull("groups") {
		return nil, Groups{}, false, e.Errorf("has no value for groups; leave groups out to let everyone signed in see this cluster, or write \"groups: []\" to let no one.")
	}
	var hasGroups bool
	if groups.Names, hasGroups, err = e.Strings("groups"); err != nil {
		return nil, Groups{}, false, err
	}
	groups.Everyone = !hasGroups
	if forwardToken, _, err = e.Bool("forwardToken"); err != nil {
		return nil, Groups{}, false, err
	}
	return labels, groups, forwardToken, nil
}

// Config is what Load needs. cmd/tether fills it from the settings; nothing here reads the
// environment.
type Config struct {
	// Agents is the value of TETHER_FLEET_AGENTS, AgentsFile that of TETHER_FLEET_AGENTS_FILE.
	Agents, AgentsFile string
	// Logger gets the reloads and the reasons a reload was refused. Nil discards them.
	Logger *slog.Logger
	// Debounce is how long Watch waits after a change in the file's directory before reading it,
	// so a burst of events (Kubernetes makes several per Secret update) reads the file once.
	// Zero means 100 ms.
	Debounce time.Duration
	// PollInterval is how often Watch reads the file even without events, for file systems that
	// send none and directories that were replaced. Zero means a minute; negative, never.
	PollInterval time.Duration
	// Extra are entries that are part of the list whatever the setting says: the hub's own agents
	// for the clusters it reaches directly (TETHER_FLEET_CLUSTERS). A name in both is an error at
	// start, and makes a reload keep the last good list.
	Extra []Agent
	// OnChange, if set, is called by Watch after a reload changed the list, so the hub can drop
	// agents that were removed or whose token was revoked. It runs on Watch's goroutine: reloads
	// wait for it.
	OnChange func(Change)
}

// Change says how a new list differs from the one it replaced. Each slice is sorted.
type Change struct {
	Added   []string
	Removed []string
	// Updated are names still in the list whose entry changed in any way.
	Updated []string
	// TokensRevoked are names, among Updated, that no longer accept a token hash they accepted
	// before: their connected agents may hold a token that no longer works. Adding a second hash
	// to start a rotation revokes nothing.
	TokensRevoked []string
}

// Empty reports whether nothing changed.
func (c Change) Empty() bool { return len(c.Added)+len(c.Removed)+len(c.Updated) == 0 }

// HasList reports whether TETHER_FLEET_AGENTS or TETHER_FLEET_AGENTS_FILE
// is set: whether the hub has an agents list of its own, beside Extra.
func (c Config) HasList() bool {
	return strings.TrimSpace(c.Agents) != "" || strings.TrimSpace(c.AgentsFile) != ""
}

// Agents holds the current agents list; it is safe for concurrent use. A nil *Agents is a hub
// without an agents list: it knows no agent (the hub answers agents 403 then, not 401).
type Agents struct {
	cur atomic.Pointer[snapshot]
	mu  sync.Mutex // serializes Replace, so each Change is against the list it replaced

	cfg    Config
	path   string // the file Watch follows, or "" for a list from TETHER_FLEET_AGENTS
	loaded []byte // the file's content when Load read it
}

// snapshot is one list; it is never modified once published.
type snapshot struct {
	list   []Agent
	byName map[string]int
}

func newSnapshot(list []Agent) *snapshot {
	s := &snapshot{list: slices.Clone(list), byName: make(map[string]int, len(list))}
	for i, a := range s.list {
		if _, dup := s.byName[a.Name]; !dup {
			s.byName[a.Name] = i
		}
	}
	return s
}

// New returns a holder for list, which must be valid as ParseAgents returns it.
func New(list []Agent) *Agents {
	a := &Agents{}
	a.cur.Store(newSnapshot(list))
	return a
}

// Load reads the agents list from TETHER_FLEET_AGENTS or TETHER_FLEET_AGENTS_FILE. It returns
// nil and no error when neither is set: the hub has no agents list. Errors are *ListError for a
// bad list, and name the setting.
func Load(cfg Config) (*Agents, error) {
	src, ok, err := listfile.ReadSource(SettingAgents, cfg.Agents, cfg.AgentsFile)
	if err != nil {
		return nil, err
	}
	if !ok {
		if len(cfg.Extra) == 0 {
			return nil, nil
		}
		a := New(cfg.Extra)
		a.cfg = cfg
		return a, nil
	}
	list, err := parseWithExtra(src.Setting, src.Data, cfg.Extra)
	if err != nil {
		return nil, err
	}
	a := New(list)
	a.cfg, a.path, a.loaded = cfg, src.Path, src.Data
	return a, nil
}

func (a *Agents) snapshot() *snapshot {
	if a == nil {
		return &snapshot{}
	}
	return a.cur.Load()
}

// Lookup returns the entry called name.
func (a *Agents) Lookup(name string) (Agent, bool) {
	s := a.snapshot()
	i, ok := s.byName[name]
	if !ok {
		return Agent{}, false
	}
	return s.list[i], true
}

// List returns every entry, in the list's order.
func (a *Agents) List() []Agent { return slices.Clone(a.snapshot().list) }

// Len is the number of agents in the list, without copying it.
func (a *Agents) Len() int { return len(a.snapshot().list) }

// Authenticate returns the entry called name if token is one of its tokens. An unknown name
// costs the same work as a wrong token (a hash and two constant-time comparisons against a dummy
// entry), so the answer's timing doesn't tell which names exist.
func (a *Agents) Authenticate(name, token string) (Agent, bool) {
	agent, found := a.Lookup(name)
	if !found {
		agent = Agent{TokenHashes: []listfile.Hash{{}, {}}} // a dummy; its result is discarded below
	}
	ok := agent.AcceptsHash(listfile.HashToken(token))
	if !found || !ok {
		return Agent{}, false
	}
	return agent, true
}

// Replace puts list in force and returns how it differs from the list before. list must be valid
// as ParseAgents returns it; Replace keeps its own copy of the slice. Unlike the other methods,
// it needs an *Agents from New or Load.
func (a *Agents) Replace(list []Agent) Change {
	a.mu.Lock()
	defer a.mu.Unlock()
	old, next := a.cur.Load(), newSnapshot(list)
	a.cur.Store(next)
	return diff(old, next)
}

func diff(old, next *snapshot) Change {
	var c Change
	for name, i := range next.byName {
		j, ok := old.byName[name]
		switch {
		case !ok:
			c.Added = append(c.Added, name)
		case !next.list[i].equal(old.list[j]):
			c.Updated = append(c.Updated, name)
			for _, h := range old.list[j].TokenHashes {
				if !slices.Contains(next.list[i].TokenHashes, h) {
					c.TokensRevoked = append(c.TokensRevoked, name)
					break
				}
			}
		}
	}
	for name := range old.byName {
		if _, ok := next.byName[name]; !ok {
			c.Removed = append(c.Removed, name)
		}
	}
	slices.Sort(c.Added)
	slices.Sort(c.Removed)
	slices.Sort(c.Updated)
	slices.Sort(c.TokensRevoked)
	return c
}
