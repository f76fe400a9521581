package fleet

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/tetherhq/tether/internal/listfile"
)

// Watch follows TETHER_FLEET_AGENTS_FILE until ctx is done, reloading the list when its content
// changes. A list that doesn't parse, or a file that can't be read, leaves the last good list in
// force, and the reason is logged. After each reload that changed something it logs the change
// and calls Config.OnChange. It returns at once, with nil, when the list did not come from a
// file. Call it once per Agents.
func (a *Agents) Watch(ctx context.Context) error {
	if a == nil || a.path == "" {
		return nil
	}
	log := a.cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	opts := listfile.WatchOptions{Debounce: a.cfg.Debounce, PollInterval: a.cfg.PollInterval, Initial: a.loaded,
		Unwatched: func(err error) {
			log.Warn("Can't watch the agents list's directory; reading the file every minute instead", "file", a.path, "err", err)
		}}
	return listfile.WatchFile(ctx, a.path, opts, func(data []byte, err error) {
		if err != nil {
			log.Warn("Can't read the agents list; keeping the last good one", "file", a.path, "err", err)
			return
		}
		list, err := parseWithExtra(SettingAgentsFile, data, a.cfg.Extra)
		if err != nil {
			log.Warn("The agents list has an error; keeping the last good one", "file", a.path, "err", err)
			return
		}
		c := a.Replace(list)
		if c.Empty() {
			return
		}
		log.Info("Reloaded the agents list: "+c.describe(), "file", a.path, "agents", len(list))
		if a.cfg.OnChange != nil {
			a.cfg.OnChange(c)
		}
	})
}

// describe words a change for a log line; names are quoted, as they come from outside.
func (c Change) describe() string {
	var parts []string
	for _, p := range []struct {
		what  string
		names []string
	}{{"added", c.Added}, {"removed", c.Removed}, {"changed", c.Updated}, {"tokens revoked", c.TokensRevoked}} {
		if len(p.names) > 0 {
			parts = append(parts, p.what+" "+quoteNames(p.names, 10))
		}
	}
	return strings.Join(parts, "; ")
}

func quoteNames(names []string, max int) string {
	var b bytes.Buffer
	for i, n := range names {
		if i == max {
			fmt.Fprintf(&b, " and %d more", len(names)-max)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q", n)
	}
	return b.String()
}
