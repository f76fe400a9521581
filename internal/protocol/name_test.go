package protocol

import (
	"strings"
	"testing"
)

func TestCheckName(t *testing.T) {
	for _, tt := range []struct {
		name string
		ok   bool
	}{
		{"private-eu", true},
		{"a", true},
		{"0", true},
		{"eu-1", true},
		{strings.Repeat("a", 63), true},
		{"", false},
		{strings.Repeat("a", 64), false},
		{"-eu", false},
		{"eu-", false},
		{"Private-EU", false},
		{"eu.1", false},
		{"eu_1", false},
		{"eu 1", false},
		{"ü", false},
	} {
		err := CheckName(tt.name)
		if (err == nil) != tt.ok {
			t.Errorf("CheckName(%q) = %v, want ok %v", tt.name, err, tt.ok)
			continue
		}
		// People read the error: it quotes the name and gives the rule.
		if err != nil && (!strings.Contains(err.Error(), `"`+tt.name+`"`) || !strings.Contains(err.Error(), NameRule)) {
			t.Errorf("CheckName(%q) = %q, want the name quoted and the rule", tt.name, err)
		}
	}
}
