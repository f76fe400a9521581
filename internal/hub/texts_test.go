package hub

import (
	"fmt"
	"strings"
	"testing"
	"unsafe"
)

// TestTextsKeepOneCopy: equal texts come back as one copy, a part of a
// larger string is kept apart from it, and past the bound the table
// starts afresh.
func TestTextsKeepOneCopy(t *testing.T) {
	var tx texts
	same := func(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }
	big := strings.Repeat("x", 1<<20) + "the agent says: refused"
	first := tx.of(big[1<<20:])
	if first != "the agent says: refused" || same(first, big[1<<20:]) {
		t.Errorf("kept %q, sharing the larger string: %v", first, same(first, big[1<<20:]))
	}
	if again := tx.of(strings.Clone(first)); !same(again, first) {
		t.Error("an equal text came back as another copy")
	}
	if tx.of("") != "" {
		t.Error("the empty text changed")
	}
	for i := 0; ; i++ {
		was := tx.bytes
		tx.of(fmt.Sprintf("%d %s", i, strings.Repeat("y", 1<<10)))
		if tx.bytes < was {
			break
		}
	}
	if _, ok := tx.m[first]; ok {
		t.Error("past the bound, the old texts are still kept")
	}
}
