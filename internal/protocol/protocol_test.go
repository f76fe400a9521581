package protocol

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestRoundTrip(t *testing.T) {
	msgs := []Message{
		{Type: TypeHello, Protocol: Version, AgentVersion: "v1", CACert: "pem", ServiceAccountToken: "sa", APIServer: "10.0.0.1:443"},
		{Type: TypeHello, Protocol: Version, CACert: "pem", ServiceAccountToken: "sa", APIServer: "10.0.0.1:443", Ceiling: CeilingEnforced},
		{Type: TypeHello, Protocol: Version, CACert: "pem", ServiceAccountToken: "sa", APIServer: "10.0.0.1:443", Ceiling: CeilingUnavailable,
			CeilingError: "strictMode needs constrained impersonation, Kubernetes 1.36 or later; this cluster runs 1.33"},
		{Type: TypeHello, Protocol: Version, CACert: "pem", ServiceAccountToken: "sa", APIServer: "10.0.0.1:443", ProxyOff: true, InventoryOff: true},
		{Type: TypeHello, Protocol: Version, CACert: "pem", ServiceAccountToken: "sa", APIServer: "10.0.0.1:443", Moves: true},
		{Type: TypeHello, Protocol: Version, CACert: "pem", ServiceAccountToken: "sa", APIServer: "10.0.0.1:443", Moves: true, Move: true},
		{Type: TypeWelcome, HubVersion: "v1", HeartbeatMillis: 30000},
		{Type: TypeRefused, Status: 401, Error: "no"},
		{Type: TypePing, Seq: 7},
		{Type: TypePong, Seq: 7},
		{Type: TypeToken, ServiceAccountToken: "new"},
		{Type: TypeGoAway, Reason: ReasonShutdown, ReconnectAfterMillis: 1234},
		{Type: TypeGoAway, Reason: ReasonMove},
		{Type: TypeBye},
		{Type: TypeDial, Error: "dial tcp: refused"},
		{Type: TypeOpen, Own: true},
	}
	var buf bytes.Buffer
	for _, m := range msgs {
		if err := Write(&buf, m); err != nil {
			t.Fatalf("Write(%v): %v", m, err)
		}
	}
	for _, want := range msgs {
		got, err := Read(&buf)
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		if got != want {
			t.Errorf("Read = %+v, want %+v", got, want)
		}
	}
	if _, err := Read(&buf); err != io.EOF {
		t.Errorf("Read at the end = %v, want io.EOF", err)
	}
}

func TestReadRejects(t *testing.T) {
	frame := func(body string) []byte {
		b := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
		return append(b, body...)
	}
	tests := []struct {
		name  string
		input []byte
		want  string
	}{
		// SPEC section 1: a hello over 1 MiB ends the connection; 1 MiB
		// itself is read (here it is cut short).
		{"too large", binary.BigEndian.AppendUint32(nil, 1<<20+1), "too large"},
		{"1 MiB, cut short", binary.BigEndian.AppendUint32(nil, 1<<20), "unexpected EOF"},
		{"truncated", frame(`{"type":"ping"}`)[:8], "unexpected EOF"},
		{"not json", frame(`hello`), "decode message"},
		{"unknown type", frame(`{"type":"launch"}`), `unknown message type "launch"`},
		{"hello without version", frame(`{"type":"hello","caCert":"x","serviceAccountToken":"y","apiServer":"z"}`), "protocol version"},
		{"hello without token", frame(`{"type":"hello","protocol":1,"caCert":"x","apiServer":"z"}`), "needs caCert"},
		{"hello with an unknown ceiling", frame(`{"type":"hello","protocol":1,"caCert":"x","serviceAccountToken":"y","apiServer":"z:1","ceiling":"partial"}`), `unknown ceiling "partial"`},
		{"unavailable ceiling without why", frame(`{"type":"hello","protocol":1,"caCert":"x","serviceAccountToken":"y","apiServer":"z:1","ceiling":"unavailable"}`), "needs a ceilingError of 1 to 1024 bytes, not 0"},
		{"unavailable ceiling, why too long", frame(`{"type":"hello","protocol":1,"caCert":"x","serviceAccountToken":"y","apiServer":"z:1","ceiling":"unavailable","ceilingError":"` + strings.Repeat("x", 1025) + `"}`), "not 1025"},
		{"a ceilingError with the ceiling enforced", frame(`{"type":"hello","protocol":1,"caCert":"x","serviceAccountToken":"y","apiServer":"z:1","ceiling":"enforced","ceilingError":"no"}`), "ceilingError with ceiling"},
		{"an instance too long", frame(`{"type":"hello","protocol":1,"caCert":"x","serviceAccountToken":"y","apiServer":"z:1","instance":"` + strings.Repeat("a", 65) + `"}`), "instance must be at most 64"},
		{"an instance with a space", frame(`{"type":"hello","protocol":1,"caCert":"x","serviceAccountToken":"y","apiServer":"z:1","instance":"a b"}`), "instance must be at most 64"},
		{"a move from an agent that doesn't move", frame(`{"type":"hello","protocol":1,"caCert":"x","serviceAccountToken":"y","apiServer":"z:1","move":true}`), "move without moves"},
		{"welcome without heartbeat", frame(`{"type":"welcome"}`), "heartbeatMillis"},
		{"negative goaway delay", frame(`{"type":"goaway","reconnectAfterMillis":-1}`), "not -1"},
		// A time.Duration in nanoseconds holds 292 years: a heartbeat that
		// overflowed one crashed the agent's ticker.
		{"heartbeat past a year", frame(`{"type":"welcome","hubVersion":"v1","heartbeatMillis":31536000001}`), "heartbeatMillis from 1 to 31536000000"},
		{"heartbeat past a Duration", frame(`{"type":"welcome","hubVersion":"v1","heartbeatMillis":9223372036855}`), "not 9223372036855"},
		{"goaway delay past a year", frame(`{"type":"goaway","reconnectAfterMillis":31536000001}`), "reconnectAfterMillis from 0 to 31536000000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Read(bytes.NewReader(tt.input))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Read = %v, want an error with %q", err, tt.want)
			}
		})
	}
	_, err := Read(bytes.NewReader(binary.BigEndian.AppendUint32(nil, 1<<31)))
	if !errors.Is(err, ErrTooLarge) {
		t.Errorf("Read of a 2 GiB claim = %v, want ErrTooLarge", err)
	}
}

func TestWriteRejectsTooLarge(t *testing.T) {
	err := Write(io.Discard, Message{Type: TypeHello, CACert: strings.Repeat("x", MaxMessageSize)})
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Write = %v, want ErrTooLarge", err)
	}
}

func TestStringHidesSecrets(t *testing.T) {
	m := Message{Type: TypeHello, ServiceAccountToken: "secret-token"}
	if s := m.String(); strings.Contains(s, "secret-token") {
		t.Fatalf("String() = %q shows the token", s)
	}
}

// FuzzRead feeds arbitrary bytes to the decoder the hub and agent run on what
// the other side sends: it must never panic, and what it accepts must
// survive a round trip.
func FuzzRead(f *testing.F) {
	var seed bytes.Buffer
	_ = Write(&seed, Message{Type: TypeHello, Protocol: 1, CACert: "c", ServiceAccountToken: "t", APIServer: "a:1"})
	f.Add(seed.Bytes())
	seed.Reset()
	_ = Write(&seed, Message{Type: TypeHello, Protocol: 1, CACert: "c", ServiceAccountToken: "t", APIServer: "a:1", Ceiling: CeilingUnavailable, CeilingError: "1.33"})
	f.Add(seed.Bytes())
	seed.Reset()
	_ = Write(&seed, Message{Type: TypeOpen, Own: true})
	f.Add(seed.Bytes())
	seed.Reset()
	_ = Write(&seed, Message{Type: TypeHello, Protocol: 1, CACert: "c", ServiceAccountToken: "t", APIServer: "a:1", Moves: true, Move: true})
	f.Add(seed.Bytes())
	seed.Reset()
	_ = Write(&seed, Message{Type: TypeGoAway, Reason: ReasonMove})
	f.Add(seed.Bytes())
	f.Add([]byte{0, 0, 0, 2, '{', '}'})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Read(bytes.NewReader(data))
		if err != nil {
			return
		}
		var buf bytes.Buffer
		if err := Write(&buf, m); err != nil {
			t.Fatalf("Write of an accepted message: %v", err)
		}
		again, err := Read(&buf)
		if err != nil || again != m {
			t.Fatalf("round trip: %+v, %v; want %+v", again, err, m)
		}
	})
}

func TestUpdateRoundTripAndLimits(t *testing.T) {
	var buf bytes.Buffer
	in := &Update{Snapshot: true, Complete: true, GatewayTieBreaker: "istio-system/public",
		Kinds:   []KindState{{Kind: "pods"}, {Kind: "nodes", Error: "forbidden"}},
		Upserts: []Resource{{ResourceRef: ResourceRef{Kind: "pods", Namespace: "a", Name: "p"}, Ready: true, Labels: map[string]string{"app": "x"}}},
		Deletes: []ResourceRef{{Kind: "pods", Namespace: "a", Name: "q"}},
	}
	if err := WriteUpdate(&buf, in); err != nil {
		t.Fatal(err)
	}
	out, err := ReadUpdate(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Errorf("round trip: %+v, want %+v", out, in)
	}
	for name, body := range map[string]string{
		"unnamed object":  `{"upserts":[{"kind":"pods","namespace":"a"}]}`,
		"no kind":         `{"deletes":[{"name":"x"}]}`,
		"empty kind":      `{"kinds":[{"kind":""}]}`,
		"not json":        `{"upserts":`,
		"long name":       `{"upserts":[{"kind":"pods","name":"` + strings.Repeat("n", maxField+1) + `"}]}`,
		"long kind":       `{"deletes":[{"kind":"` + strings.Repeat("k", maxField+1) + `","name":"x"}]}`,
		"long namespace":  `{"deletes":[{"kind":"pods","namespace":"` + strings.Repeat("s", maxField+1) + `","name":"x"}]}`,
		"long kind state": `{"kinds":[{"kind":"` + strings.Repeat("k", maxField+1) + `"}]}`,
	} {
		if _, err := DecodeUpdate([]byte(body)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	many := &Update{}
	for i := range MaxUpdateItems + 1 {
		many.Deletes = append(many.Deletes, ResourceRef{Kind: "pods", Name: fmt.Sprint(i)})
	}
	b, _ := json.Marshal(many)
	if _, err := DecodeUpdate(b); err == nil {
		t.Error("an update over MaxUpdateItems was accepted")
	}
}

// TestClip: text cut for the hub (a condition's message, a kind's error)
// stays within its bound, cut between characters, and says it was cut.
func TestClip(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 8, "short"},
		{"exactly8", 8, "exactly8"},
		{"a bit longer", 8, "a bit…"},
		{"ééééé", 8, "éé…"}, // the third é would be cut in half
	} {
		if got := Clip(tc.in, tc.n); got != tc.want {
			t.Errorf("Clip(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

// TestLongKindErrorIsCut: a kind's error over the limit (a webhook's long
// message) is cut to it, on a character's boundary, and the rest of the
// update is taken: refusing it refused the cluster's whole inventory.
func TestLongKindErrorIsCut(t *testing.T) {
	long := strings.Repeat("é", maxField) // two bytes each
	b, _ := json.Marshal(&Update{Snapshot: true, Kinds: []KindState{{Kind: "pods", Error: long}, {Kind: "nodes"}}})
	u, err := DecodeUpdate(b)
	if err != nil {
		t.Fatalf("an update with a long kind error: %v", err)
	}
	e := u.Kinds[0].Error
	if len(e) > maxField || !utf8.ValidString(e) || !strings.HasSuffix(e, "é…") {
		t.Errorf("the long error became %d bytes ending %q, want at most %d, cut between characters and marked", len(e), e[max(len(e)-8, 0):], maxField)
	}
	if len(u.Kinds) != 2 || !u.Snapshot {
		t.Errorf("the rest of the update: %+v", u)
	}
}

// FuzzReadUpdate feeds the hub's inventory reader what an agent could send:
// it must return an error or an update within the limits, never panic
// (TestReadAllocatesWhatArrives bounds what a claimed length allocates).
func FuzzReadUpdate(f *testing.F) {
	var buf bytes.Buffer
	WriteUpdate(&buf, &Update{Snapshot: true, Complete: true, Upserts: []Resource{{ResourceRef: ResourceRef{Kind: "pods", Name: "p"}}}})
	f.Add(buf.Bytes())
	f.Add([]byte("\x00\x00\x00\x02{}"))
	f.Add([]byte("\xff\xff\xff\xff"))
	f.Add([]byte("\x00\x00\x00\x10{\"deletes\":[{}]}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		u, err := ReadUpdate(bytes.NewReader(data))
		if err != nil {
			return
		}
		// The limits, checked here on their own, not by Validate again.
		if n := len(u.Upserts) + len(u.Deletes); n > MaxUpdateItems {
			t.Fatalf("an update of %d objects, over %d", n, MaxUpdateItems)
		}
		refs := slices.Collect(func(yield func(ResourceRef) bool) {
			for _, r := range u.Upserts {
				yield(r.ResourceRef)
			}
			for _, r := range u.Deletes {
				yield(r)
			}
		})
		for _, r := range refs {
			if r.Kind == "" || r.Name == "" || len(r.Kind) > maxField || len(r.Name) > maxField || len(r.Namespace) > maxField {
				t.Fatalf("an object %q %q %q past the limits", r.Kind, r.Namespace, r.Name)
			}
		}
		for _, k := range u.Kinds {
			if k.Kind == "" || len(k.Kind) > maxField || len(k.Namespace) > maxField || len(k.Error) > maxField {
				t.Fatalf("a kind state past the limits: %d, %d, %d bytes", len(k.Kind), len(k.Namespace), len(k.Error))
			}
		}
	})
}

// TestReadAllocatesWhatArrives: a length prefix claiming the largest message
// allowed, followed by a few bytes, costs a few bytes, not a megabyte.
func TestReadAllocatesWhatArrives(t *testing.T) {
	var prefix [4]byte
	binary.BigEndian.PutUint32(prefix[:], MaxMessageSize)
	in := append(prefix[:], `{"type":`...)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := Read(bytes.NewReader(in))
	runtime.ReadMemStats(&after)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("Read = %v, want an unexpected EOF", err)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 64<<10 {
		t.Fatalf("Read allocated %d bytes for %d that arrived", n, len(in))
	}
}

// TestMoveOnTheWire pins the names a hub of another version reads: a
// hello's moves and move, and the goaway reason move.
func TestMoveOnTheWire(t *testing.T) {
	tests := []struct {
		m    Message
		want string
	}{
		{Message{Type: TypeHello, Moves: true, Move: true}, `"moves":true,"move":true`},
		{Message{Type: TypeHello, Moves: true}, `"moves":true}`},
		{Message{Type: TypeGoAway, Reason: ReasonMove}, `{"type":"goaway","reason":"move"}`},
	}
	for _, tt := range tests {
		b, err := json.Marshal(tt.m)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), tt.want) {
			t.Errorf("%s encodes as %s, want %s in it", tt.m, b, tt.want)
		}
	}
}
