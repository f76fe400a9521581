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
// cluster-admin everywhere), one with control characters, which would garble audit logs and
// headers, and one with spaces at either end, which looks like another name in a log line but
// isn't. An empty name or group is refused too: Kubernetes refuses to impersonate it.
//
// Its errors are for the person refused, quote the value, and wrap ErrIdentity.
func CheckIdentity(name string, groups []string) error {
	if err := checkIdentityText(name); err != nil {
		return fmt.Errorf("%w: your user name %q %s", ErrIdentity, name, err)
	}
	for _, g := range groups {
		if err := checkIdentityText(g); err != nil {
			return fmt.Errorf("%w: your group %q %s", ErrIdentity, g, err)
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

// checkText refuses what no name or group may be: empty, not UTF-8, with control characters,
// or with spaces at either end. Its errors complete a sentence about the value.
func checkText(s string) error {
	switch {
	case s == "":
		return errors.New("is empty")
	case !utf8.ValidString(s):
		return errors.New("is not valid UTF-8")
	case strings.ContainsFunc(s, unicode.IsControl):
		return errors.New("contains control characters")
	case strings.TrimSpace(s) != s:
		return errors.New("has spaces at the start or end")
	}
	return nil
}
