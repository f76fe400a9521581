// Package protocol defines what the agent and the hub say to each other: the
// names on the WebSocket upgrade, the control messages and their framing, and
// the close reasons. docs/protocol.md is the prose version of this file; keep
// the two in step.
package protocol

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"unicode"
)

// Version is the protocol version this build speaks. A hub refuses a hello
// whose version it does not know, so an incompatible change bumps it.
const Version = 1

// Names on the WebSocket upgrade request.
const (
	// AgentPath is where agents connect, below the hub's base path.
	AgentPath = "api/agent"
	// AgentHeader carries the agent's name; its token goes in Authorization.
	AgentHeader = "Tether-Agent"
	// MoveHeader, set to "1", says the upgrade is an agent moving at a
	// hub's request (ReasonMove), as the hello's Move will: a replica that
	// holds more than its share may turn it away with 503 and Retry-After
	// before the upgrade, so that its next try lands on another.
	MoveHeader = "Tether-Move"
)

// MaxMessageSize bounds every control message, the hello included (SPEC: a
// hello over 1 MiB ends the connection).
const MaxMessageSize = 1 << 20

// Message types.
const (
	TypeHello   = "hello"   // agent → hub, first message on the control stream
	TypeWelcome = "welcome" // hub → agent, the answer to a hello it accepts
	TypeRefused = "refused" // hub → agent, the answer to a hello it refuses; the hub then closes
	TypePing    = "ping"    // hub → agent, every heartbeat interval
	TypePong    = "pong"    // agent → hub, the answer to a ping, same Seq
	TypeToken   = "token"   // agent → hub, a new service account token
	TypeGoAway  = "goaway"  // hub → agent, the hub is closing this connection (Reason says why)
	TypeBye     = "bye"     // agent → hub, the agent is stopping
	TypeDial    = "dial"    // agent → hub, first message on a hub-opened stream: the dial's result
	// TypeOpen is hub → agent, the first message on a stream the hub opens
	// to an agent whose hello said ProxyOff, before the agent dials: Own
	// marks the hub's own probes and access reviews, the only streams such
	// an agent carries. Other agents are sent none: they dial at once.
	TypeOpen = "open"
)

// Ceilings in a hello.
const (
	// CeilingOff: no strictMode; the agent's account may impersonate
	// anyone for anything, and people's own RBAC alone decides.
	CeilingOff = "off"
	// CeilingEnforced: strictMode, and the API server enforces it with
	// constrained impersonation.
	CeilingEnforced = "enforced"
	// CeilingUnavailable: strictMode, but the API server can't enforce it
	// (older than Kubernetes 1.36, the ConstrainedImpersonation feature
	// gate off, or the account's RBAC missing): it refuses every request
	// the hub makes as a person. CeilingError says why.
	CeilingUnavailable = "unavailable"
)

// MaxCeilingError bounds a hello's ceilingError: a line or two for people.
const MaxCeilingError = 1024

// MaxInstance bounds a hello's instance.
const MaxInstance = 64

// Reasons in a goaway.
const (
	ReasonShutdown = "shutdown" // the hub is stopping: reconnect after ReconnectAfterMillis
	ReasonTakeover = "takeover" // another agent connected with this name and token: stop
	ReasonRemoved  = "removed"  // the agents list no longer admits this agent: reconnect (and be refused)
	// ReasonMove: the hub is draining (a replica stopping in a rolling
	// update). Connect again now, to whichever replica the load balancer
	// gives, with Move in the hello, and keep this connection: the
	// streams open on it go on until the hub closes it. Sent only to an
	// agent whose hello said Moves; others get ReasonShutdown.
	ReasonMove = "move"
)

// Message is every control message. Type says which fields mean something;
// the rest are left empty, and omitted on the wire.
type Message struct {
	Type string `json:"type"`

	// hello
	Protocol            int    `json:"protocol,omitempty"`
	AgentVersion        string `json:"agentVersion,omitempty"`
	CACert              string `json:"caCert,omitempty"` // PEM, the cluster's ca.crt as read
	ServiceAccountToken string `json:"serviceAccountToken,omitempty"`
	APIServer           string `json:"apiServer,omitempty"` // host:port the agent relays to
	// Ceiling says whether the cluster owner's ceiling holds (SPEC
	// section 9): CeilingOff, CeilingEnforced or CeilingUnavailable. An
	// agent from before it sends none, which means CeilingOff.
	Ceiling string `json:"ceiling,omitempty"`
	// CeilingError, with CeilingUnavailable, says why, in words for
	// people: every request through this agent would be refused.
	CeilingError string `json:"ceilingError,omitempty"`
	// ProxyOff and InventoryOff say which half the agent doesn't run
	// (TETHER_PROXY=false, TETHER_INVENTORY=false; SPEC section 9). Off
	// rather than on, so that absent, as from an agent from before them,
	// means both run. With ProxyOff the hub sends people's requests no
	// stream, and begins each of its own with an open message.
	ProxyOff     bool `json:"proxyOff,omitempty"`
	InventoryOff bool `json:"inventoryOff,omitempty"`
	// Moves says the agent understands a goaway with ReasonMove: it
	// connects again before it lets go of this connection. Every agent
	// since moves were added sends it.
	Moves bool `json:"moves,omitempty"`
	// Move says this connection is the agent moving at a hub's request
	// (ReasonMove), not a new agent: its earlier connection lives on
	// while its streams finish, and the hub tells it nothing of a
	// takeover. Only with Moves.
	Move bool `json:"move,omitempty"`
	// Instance is a random name the agent's process picks at start, and
	// Connection how many connections it had opened before this one: of
	// two connections of one instance, the higher Connection is the newer,
	// whichever hub replica each reached and whatever their clocks say
	// (an agent from before them sends neither; the hubs then compare
	// when each connected).
	Instance   string `json:"instance,omitempty"`
	Connection uint64 `json:"connection,omitempty"`

	// welcome
	HubVersion      string `json:"hubVersion,omitempty"`
	HeartbeatMillis int64  `json:"heartbeatMillis,omitempty"`

	// refused: Status is the HTTP status it stands for (401, 403).
	Status int `json:"status,omitempty"`

	// ping, pong
	Seq uint64 `json:"seq,omitempty"`

	// open: the stream is the hub's own (a probe or an access review),
	// not a person's request.
	Own bool `json:"own,omitempty"`

	// goaway
	Reason               string `json:"reason,omitempty"`
	ReconnectAfterMillis int64  `json:"reconnectAfterMillis,omitempty"`

	// refused, goaway, dial: what went wrong, in words for people.
	Error string `json:"error,omitempty"`
}

// String describes m without its secrets, so a Message is safe to log.
// ValidAPIServer reports whether addr may be a hello's apiServer:
// host:port, the host printable with no spaces, the port from 1 to 65535.
// The hub refuses a hello whose apiServer isn't, and the agent checks its
// own settings against it at start.
func ValidAPIServer(addr string) bool {
	host, port, err := net.SplitHostPort(addr)
	n, perr := strconv.Atoi(port)
	return err == nil && perr == nil && host != "" && n >= 1 && n <= 65535 &&
		!strings.ContainsFunc(host, func(r rune) bool { return !unicode.IsPrint(r) || r == ' ' })
}

func (m Message) String() string {
	return fmt.Sprintf("%s message", m.Type)
}

// ErrTooLarge is returned for a message over MaxMessageSize.
var ErrTooLarge = errors.New("protocol: message too large")

// MaxMillis bounds every duration a message carries in milliseconds: a
// year, the most any setting allows, and far inside a time.Duration, even
// doubled, as the agent's silence rule doubles the heartbeat.
const MaxMillis = 365 * 24 * 60 * 60 * 1000

// Validate checks that m is a message this version understands, with the
// fields its type needs.
func (m *Message) Validate() error {
	switch m.Type {
	case TypeHello:
		if m.Protocol < 1 {
			return fmt.Errorf("protocol: hello without a protocol version")
		}
		if m.APIServer == "" || m.CACert == "" || m.ServiceAccountToken == "" {
			return fmt.Errorf("protocol: hello needs caCert, serviceAccountToken and apiServer")
		}
		if m.Move && !m.Moves {
			return fmt.Errorf("protocol: hello says move without moves")
		}
		if len(m.Instance) > MaxInstance || strings.ContainsFunc(m.Instance, func(r rune) bool { return r <= ' ' || r > '~' }) {
			return fmt.Errorf("protocol: hello's instance must be at most %d printable ASCII characters", MaxInstance)
		}
		switch m.Ceiling {
		case "", CeilingOff, CeilingEnforced:
			if m.CeilingError != "" {
				return fmt.Errorf("protocol: hello has a ceilingError with ceiling %q", m.Ceiling)
			}
		case CeilingUnavailable:
			if m.CeilingError == "" || len(m.CeilingError) > MaxCeilingError {
				return fmt.Errorf("protocol: hello with ceiling %q needs a ceilingError of 1 to %d bytes, not %d", m.Ceiling, MaxCeilingError, len(m.CeilingError))
			}
		default:
			return fmt.Errorf("protocol: hello with an unknown ceiling %q", m.Ceiling)
		}
	case TypeWelcome:
		if m.HeartbeatMillis <= 0 || m.HeartbeatMillis > MaxMillis {
			return fmt.Errorf("protocol: welcome needs a heartbeatMillis from 1 to %d (a year), not %d", MaxMillis, m.HeartbeatMillis)
		}
	case TypeRefused:
		if m.Status == 0 {
			return fmt.Errorf("protocol: refused needs a status")
		}
	case TypeToken:
		if m.ServiceAccountToken == "" {
			return fmt.Errorf("protocol: token needs serviceAccountToken")
		}
	case TypeGoAway:
		if m.ReconnectAfterMillis < 0 || m.ReconnectAfterMillis > MaxMillis {
			return fmt.Errorf("protocol: goaway needs a reconnectAfterMillis from 0 to %d (a year), not %d", MaxMillis, m.ReconnectAfterMillis)
		}
	case TypePing, TypePong, TypeBye, TypeDial, TypeOpen:
	default:
		return fmt.Errorf("protocol: unknown message type %q", m.Type)
	}
	return nil
}

// Write sends m as one frame: its JSON length as 4 bytes, big-endian, then
// the JSON. The frame goes out in a single Write.
func Write(w io.Writer, m Message) error {
	return writeFrame(w, m.Type, m)
}

// Read reads one frame written by Write and checks it with Validate. It never
// allocates more than MaxMessageSize, whatever the length prefix claims.
func Read(r io.Reader) (Message, error) {
	body, err := readFrame(r)
	if err != nil {
		return Message{}, err
	}
	return Decode(body)
}

// Decode parses and validates one message's JSON.
func Decode(body []byte) (Message, error) {
	var m Message
	if err := json.Unmarshal(body, &m); err != nil {
		return Message{}, fmt.Errorf("protocol: decode message: %w", err)
	}
	if err := m.Validate(); err != nil {
		return Message{}, err
	}
	return m, nil
}

// writeFrame sends v's JSON as one frame in a single Write; what names the
// message in errors.
func writeFrame(w io.Writer, what string, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("protocol: encode %s: %w", what, err)
	}
	if len(body) > MaxMessageSize {
		return fmt.Errorf("protocol: encode %s of %d bytes: %w", what, len(body), ErrTooLarge)
	}
	frame := make([]byte, 4+len(body))
	binary.BigEndian.PutUint32(frame, uint32(len(body)))
	copy(frame[4:], body)
	if _, err := w.Write(frame); err != nil {
		return fmt.Errorf("protocol: send %s: %w", what, err)
	}
	return nil
}

// readFrame reads one frame's body, refusing one over MaxMessageSize before
// allocating it.
func readFrame(r io.Reader) ([]byte, error) {
	var prefix [4]byte
	if _, err := io.ReadFull(r, prefix[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(prefix[:])
	if n > MaxMessageSize {
		return nil, fmt.Errorf("protocol: a message of %d bytes: %w", n, ErrTooLarge)
	}
	// Memory grows with the bytes that arrive, not with the length
	// claimed: a peer that announces a megabyte and sends nothing holds
	// nothing.
	body, err := io.ReadAll(io.LimitReader(r, int64(n)))
	if err == nil && len(body) < int(n) {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return nil, fmt.Errorf("protocol: read message: %w", err)
	}
	return body, nil
}
