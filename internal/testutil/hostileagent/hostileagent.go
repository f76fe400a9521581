// Package hostileagent is an agent for tests that says whatever its test
// tells it. It connects to a hub with a valid name and token exactly as the
// real agent does (the WebSocket upgrade, the tunnel, the hello on the
// control stream), answers the hub's pings so the connection stays, and then
// lets the test send anything: a crafted hello, inventory updates of any
// size that never complete, frames over the protocol's limits, any text as
// a dial error. A token is all an attacker on a cluster needs for this, so
// every limit the hub keeps against its agents is tested against it.
//
//	a, err := hostileagent.Dial(ctx, hostileagent.Config{HubURL: url, Name: "c", Token: tok})
//	defer a.Close()
//	inv, err := a.OpenInventory(ctx)
//	inv.Send(&protocol.Update{Snapshot: true, Upserts: ...}) // and never Complete
package hostileagent

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/tetherhq/tether/internal/pki"
	"github.com/tetherhq/tether/internal/protocol"
	"github.com/tetherhq/tether/internal/tunnel"
)

// Config says which hub to reach, as whom, and what to say first.
type Config struct {
	// HubURL is the hub's address as an agent's TETHER_HUB_URL gives it:
	// http or https, base path included.
	HubURL string
	// Name and Token are an entry of the hub's agents list.
	Name, Token string
	// TLSConfig is for an https hub; nil means the system's roots.
	TLSConfig *tls.Config
	// Hello is the hello sent. Its zero fields are filled in as a real
	// agent's would be: type hello, this protocol version, agentVersion
	// "hostile", a CA made for the agent, a service account token, and
	// apiServer 10.0.0.1:443. To send a hello no agent would, set RawHello.
	Hello protocol.Message
	// RawHello, when set, is sent as the hello's frame instead of Hello,
	// unchecked: any JSON value, however large.
	RawHello any
}

// Agent is one connection to a hub. Its methods may be called from any
// goroutine; Close ends it and waits for everything it started.
type Agent struct {
	// Welcome is the hub's answer to the hello.
	Welcome protocol.Message

	sess    *tunnel.Session
	ctl     net.Conn
	writeMu sync.Mutex // guards writes to ctl
	wg      sync.WaitGroup

	mu     sync.Mutex // guards goAway
	goAway *protocol.Message
}

// Dial connects to the hub, sends the hello, and returns once the hub
// welcomed it. A refusal, of the upgrade or of the hello, is an error that
// says which.
func Dial(ctx context.Context, cfg Config) (*Agent, error) {
	u := strings.TrimRight(cfg.HubURL, "/") + "/" + protocol.AgentPath
	u = "ws" + strings.TrimPrefix(u, "http")
	h := http.Header{}
	h.Set("Authorization", "Bearer "+cfg.Token)
	h.Set(protocol.AgentHeader, cfg.Name)
	sess, resp, err := tunnel.Dial(ctx, u, tunnel.DialOptions{Header: h, TLSConfig: cfg.TLSConfig}, tunnel.DefaultConfig())
	if err != nil {
		if resp != nil {
			return nil, fmt.Errorf("hostileagent: the hub answered the upgrade with %s: %w", resp.Status, err)
		}
		return nil, fmt.Errorf("hostileagent: dial: %w", err)
	}
	a := &Agent{sess: sess}
	if err := a.hello(ctx, cfg); err != nil {
		sess.Close()
		return nil, err
	}
	a.wg.Add(1)
	go a.readControl()
	return a, nil
}

func (a *Agent) hello(ctx context.Context, cfg Config) error {
	ctl, err := a.sess.Open(ctx)
	if err != nil {
		return fmt.Errorf("hostileagent: open the control stream: %w", err)
	}
	a.ctl = ctl
	if d, ok := ctx.Deadline(); ok {
		ctl.SetDeadline(d)
	} else {
		ctl.SetDeadline(time.Now().Add(30 * time.Second))
	}
	defer ctl.SetDeadline(time.Time{})
	hello := cfg.RawHello
	if hello == nil {
		m, err := fillHello(cfg.Hello)
		if err != nil {
			return err
		}
		hello = m
	}
	if err := WriteFrame(ctl, hello); err != nil {
		return err
	}
	answer, err := protocol.Read(ctl)
	if err != nil {
		return fmt.Errorf("hostileagent: no answer to the hello: %w", err)
	}
	if answer.Type != protocol.TypeWelcome {
		return fmt.Errorf("hostileagent: the hub answered the hello with %s", answer)
	}
	a.Welcome = answer
	return nil
}

func fillHello(m protocol.Message) (protocol.Message, error) {
	if m.Type == "" {
		m.Type = protocol.TypeHello
	}
	if m.Protocol == 0 {
		m.Protocol = protocol.Version
	}
	if m.AgentVersion == "" {
		m.AgentVersion = "hostile"
	}
	if m.CACert == "" {
		ca, err := pki.NewCA("hostile agent's cluster", time.Hour)
		if err != nil {
			return m, fmt.Errorf("hostileagent: %w", err)
		}
		m.CACert = string(ca.CertPEM)
	}
	if m.ServiceAccountToken == "" {
		m.ServiceAccountToken = "hostile-service-account-token"
	}
	if m.APIServer == "" {
		m.APIServer = "10.0.0.1:443"
	}
	return m, nil
}

// readControl answers the hub's pings and keeps its goaway, until the
// control stream ends.
func (a *Agent) readControl() {
	defer a.wg.Done()
	for {
		m, err := protocol.Read(a.ctl)
		if err != nil {
			return
		}
		switch m.Type {
		case protocol.TypePing:
			a.Send(protocol.Message{Type: protocol.TypePong, Seq: m.Seq})
		case protocol.TypeGoAway:
			a.mu.Lock()
			a.goAway = &m
			a.mu.Unlock()
		}
	}
}

// Send writes v as one frame on the control stream: a protocol.Message, or
// any JSON value, unchecked, of any size.
func (a *Agent) Send(v any) error {
	a.writeMu.Lock()
	defer a.writeMu.Unlock()
	a.ctl.SetWriteDeadline(time.Now().Add(30 * time.Second))
	return WriteFrame(a.ctl, v)
}

// GoAway returns the goaway the hub sent, if it sent one.
func (a *Agent) GoAway() (protocol.Message, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.goAway == nil {
		return protocol.Message{}, false
	}
	return *a.goAway, true
}

// Done is closed when the connection has ended, whoever ended it.
func (a *Agent) Done() <-chan struct{} { return a.sess.Done() }

// OpenStream opens a stream of the agent's own: the hub takes the first as
// the inventory stream.
func (a *Agent) OpenStream(ctx context.Context) (net.Conn, error) {
	st, err := a.sess.Open(ctx)
	if err != nil {
		return nil, fmt.Errorf("hostileagent: open a stream: %w", err)
	}
	return st, nil
}

// Inventory is an inventory stream.
type Inventory struct{ net.Conn }

// OpenInventory opens the inventory stream.
func (a *Agent) OpenInventory(ctx context.Context) (*Inventory, error) {
	st, err := a.OpenStream(ctx)
	if err != nil {
		return nil, err
	}
	return &Inventory{st}, nil
}

// Send writes u as one frame, unchecked: over the protocol's limits too.
func (i *Inventory) Send(u *protocol.Update) error {
	i.SetWriteDeadline(time.Now().Add(time.Minute))
	return WriteFrame(i, u)
}

// HandleStreams has handle serve each stream the hub opens (one per
// connection it wants to the cluster's API server), in a goroutine of its
// own; Close waits for them. Streams the hub opened before it was
// called wait for it.
func (a *Agent) HandleStreams(handle func(net.Conn)) { a.sess.Handle(handle) }

// DialError is a stream handler that answers each dial with a failure that
// says text, as an agent that can't reach its API server does, and closes
// the stream.
func DialError(text string) func(net.Conn) {
	return func(st net.Conn) {
		defer st.Close()
		st.SetWriteDeadline(time.Now().Add(30 * time.Second))
		WriteFrame(st, protocol.Message{Type: protocol.TypeDial, Error: text})
	}
}

// Close ends the connection at once, without a bye, as a vanished agent
// does, and waits for what the Agent started. It may be called twice.
func (a *Agent) Close() error {
	err := a.sess.Close()
	a.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// WriteFrame writes v's JSON as one frame of the protocol (a 4-byte
// big-endian length, then the JSON), with no check of its size or content.
func WriteFrame(w net.Conn, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("hostileagent: encode: %w", err)
	}
	frame := make([]byte, 4+len(body))
	binary.BigEndian.PutUint32(frame, uint32(len(body)))
	copy(frame[4:], body)
	if _, err := w.Write(frame); err != nil {
		return fmt.Errorf("hostileagent: send: %w", err)
	}
	return nil
}
