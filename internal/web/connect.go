package web

import (
	"encoding/json"
	"strings"

	"github.com/tetherhq/tether/internal/login"
)

// Connect is the cluster page's "Connect" panel: the commands that reach
// the cluster with kubectl, as `tether login` names its context
// (login.Names, which /api/kubeconfig uses too).
type Connect struct {
	Login   string // tether login --hub <this hub's URL>
	Kubectl string // kubectl --context <its context> get ns
}

// connectCommands returns the commands for cluster on the hub people open
// at publicURL.
func connectCommands(publicURL, cluster string) Connect {
	hubURL := strings.TrimSuffix(publicURL, "/")
	kn := login.Names{Prefix: login.Prefix(publicURL)}
	return Connect{
		Login:   "tether login --hub " + shellWord(hubURL),
		Kubectl: "kubectl --context " + shellWord(kn.Context(cluster)) + " get ns",
	}
}

// shellWord quotes s for a POSIX shell when it holds anything but the
// characters URLs and context names usually have.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~/:@%+=,[]") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// timelineJSON is a timeline for a data-timeline attribute; "null" for none.
func timelineJSON(t *TimelineJSON) string {
	b, err := json.Marshal(t)
	if err != nil {
		return "null"
	}
	return string(b)
}
