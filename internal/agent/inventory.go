package agent

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/tetherhq/tether/internal/inventory/watch"
	"github.com/tetherhq/tether/internal/version"
)

// NewWatcher returns the inventory watcher for the cluster the options
// describe, as the pod's service account: list and watch only. Its token is
// read again from the file as it rotates. With TETHER_INVENTORY=false it
// returns nil, which Config.Inventory takes as no inventory.
func NewWatcher(o Options, log *slog.Logger) (*watch.Watcher, error) {
	if o.InventoryOff {
		log.Info("The inventory is off (TETHER_INVENTORY=false): nothing is watched")
		return nil, nil
	}
	return watch.New(watch.Config{
		Host:        "https://" + o.APIServer,
		CAFile:      o.caPath(),
		TokenFile:   o.tokenPath(),
		UserAgent:   "tether-agent/" + version.Version,
		Namespaces:  o.AllowedNamespaces,
		ExtraKinds:  o.ExtraKinds,
		TokenReread: o.TokenReread,
		Logger:      log,
	})
}

// inventoryRetry is how long the agent waits before it opens the inventory
// stream again after it broke while the connection lived on.
const inventoryRetry = 5 * time.Second

// streamInventory keeps the inventory stream to the hub open for the
// connection's life: a snapshot, then changes.
func (c *conn) streamInventory(ctx context.Context) {
	for {
		err := c.streamInventoryOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		c.a.log.Warn("The inventory stream to the hub broke; opening it again", "err", err)
		if c.a.cfg.Sleep(ctx, inventoryRetry) != nil {
			return
		}
	}
}

func (c *conn) streamInventoryOnce(ctx context.Context) error {
	st, err := c.sess.Open(ctx)
	if err != nil {
		return fmt.Errorf("open the inventory stream: %w", err)
	}
	defer st.Close()
	// A hub that stops reading must not hold the stream forever; the
	// session's close (when the connection ends) unblocks a write too.
	stop := context.AfterFunc(ctx, func() { st.Close() })
	defer stop()
	return c.a.cfg.Inventory.Stream(ctx, st, watch.StreamOptions{GatewayTieBreaker: c.a.cfg.GatewayTieBreaker})
}
