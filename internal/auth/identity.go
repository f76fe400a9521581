package auth

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ErrIdentity is what CheckIdentity's errors wrap: the hub answers 403 to them.
var ErrIdentity = errors.New("the hub can't act as you in the cluster")

// CheckIdentity reports whether the hub may impersonate name and groups, the final ones with
// any prefix added (Config.Impersonated). It refuses a name or group that starts with
// "system:", which Kubernetes keeps for its own users and groups (system:masters is
// cluster-admin everywhere), and what checkText refuses: control characters, which would
// garble audit logs and headers; spaces at either end, invisible formatting characters
// (zero-width, bidi) and fullwidth colons, with which a name looks like another in a log line
// ("\u200bsystem:admin", "system：admin") but isn't. An empty name or group is refused too:
// Kubernetes refuses to impersonate it.
//
// Its errors are for the person refused, quote the value (cut to a few hundred bytes), and
// wrap ErrIdentity.
func CheckIdentity(name string, groups []string) error {
	if err := checkIdentityText(name); err != nil {
		return fmt.Errorf("%w: your user name %q %s", ErrIdentity, short(name), err)
	}
	for _, g := range groups {
		if err := checkIdentityText(g); err != nil {
			return fmt.Errorf("%w: your group %q %s", ErrIdentity, short(g), err)
		}
	}
	return nil
}

// checkPerson refuses a person whose name or groups, as their source gave them (an OIDC
// claim, the auth proxy's headers, a hub-issued token made before these rules), are what no
// name may be (checkText), wherever they would go: an impersonated cluster, a forwardToken
// cluster's audit line, the page. "system:" is CheckIdentity's to refuse, after the prefix.
func checkPerson(p Person) error {
	if err := checkText(p.Name); err != nil {
		return fmt.Errorf("%w: your user name %q %s", ErrIdentity, short(p.Name), err)
	}
	for _, g := range p.Groups {
		if err := checkText(g); err != nil {
			return fmt.Errorf("%w: your group %q %s", ErrIdentity, short(g), err)
		}
	}
	return nil
}

func checkIdentityText(s string) error {
	if strings.HasPrefix(s, "system:") {
		return errors.New(`starts with "system:", which Kubernetes keeps for its own users and groups; ask the hub's operators to set a prefix or rename it`)
	}
	return checkText(s)
}

// checkText refuses what no name or group may be (SPEC section 3): empty, not UTF-8, with
// control characters (line and paragraph separators count), spaces at either end, Unicode
// format characters (category Cf: zero-width, bidi controls, soft hyphen) or a fullwidth
// colon. Its errors complete a sentence about the value.
func checkText(s string) error {
	switch {
	case s == "":
		return errors.New("is empty")
	case !utf8.ValidString(s):
		return errors.New("is not valid UTF-8")
	case strings.ContainsFunc(s, isControl):
		return errors.New("contains control characters")
	case strings.TrimSpace(s) != s:
		return errors.New("has spaces at the start or end")
	case strings.ContainsFunc(s, isFormat):
		return errors.New("contains invisible formatting characters (zero-width or bidi)")
	case strings.ContainsRune(s, fullwidthColon):
		return errors.New(`contains a fullwidth colon (U+FF1A), which reads as ":"`)
	}
	return nil
}

// fullwidthColon reads as ":" in a log line: "system：masters" would pass for
// the group Kubernetes keeps for cluster-admins.
const fullwidthColon = '\uff1a'

func isControl(r rune) bool { return unicode.IsControl(r) || unicode.In(r, unicode.Zl, unicode.Zp) }

func isFormat(r rune) bool { return unicode.Is(unicode.Cf, r) }
