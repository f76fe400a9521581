package web

import (
	"slices"
	"testing"
	"unicode/utf8"

	"github.com/tetherhq/tether/internal/auth"
)

// FuzzDecodePerson: whatever another replica sends as the person, the
// holder takes a named person, or refuses it; and what one replica
// encodes, another decodes as the same person (one auth takes: valid
// UTF-8).
func FuzzDecodePerson(f *testing.F) {
	for _, p := range []auth.Person{
		{Name: "alice", Groups: []string{"dev"}, Source: auth.SourceToken},
		{Name: "bob@example.com", Groups: []string{"a,b", "é", ""}, Source: auth.SourceOIDC, Bearer: "eyJ.x.y"},
		{Name: "x"},
	} {
		f.Add(encodePerson(p), p.Name, p.Bearer)
	}
	f.Add("", "", "")
	f.Add("e30", "", "")    // {}
	f.Add("bnVsbA", "", "") // null
	f.Add("%%%", "a", "")
	f.Fuzz(func(t *testing.T, header, name, bearer string) {
		if p, err := decodePerson(header); err == nil && p.Name == "" {
			t.Fatalf("took %q as a person with no name", header)
		}
		if name == "" || !utf8.ValidString(name) || !utf8.ValidString(bearer) {
			return // auth takes no such person (checkPerson), nor OIDC such a token
		}
		in := auth.Person{Name: name, Groups: []string{name, bearer}, Source: auth.SourceHub, Bearer: bearer}
		out, err := decodePerson(encodePerson(in))
		if err != nil || out.Name != in.Name || !slices.Equal(out.Groups, in.Groups) || out.Source != in.Source || out.Bearer != in.Bearer {
			t.Fatalf("%+v came back as %+v, %v", in, out, err)
		}
	})
}
