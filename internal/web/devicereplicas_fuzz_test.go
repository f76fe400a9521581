package web

import (
	"strings"
	"testing"
)

// FuzzDeviceIssuer: whatever device code a command sends, the replica it
// names is all before its last dot, and the random part has none.
func FuzzDeviceIssuer(f *testing.F) {
	f.Add("hub-a.ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")
	f.Add("tether-0.tether.ns.svc.K5DM")
	f.Add("ABCDEF")
	f.Add(".ABC")
	f.Add("hub.")
	f.Fuzz(func(t *testing.T, code string) {
		issuer := deviceIssuer(code)
		if issuer == "" {
			if i := strings.LastIndexByte(code, '.'); i > 0 {
				t.Fatalf("%q names no replica", code)
			}
			return
		}
		if !strings.HasPrefix(code, issuer+".") || strings.Contains(code[len(issuer)+1:], ".") {
			t.Fatalf("%q names %q", code, issuer)
		}
	})
}
