package web

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/tetherhq/tether/internal/auth"
	"github.com/tetherhq/tether/internal/inventory/store"
)

// fleetAnswers answers q for names, in their order: each cluster's
// answer-to-be comes on the channel it returns, at most fleetQueryAhead
// ahead of the one the caller reads, which must read them all until the
// channel closes, then call wait. The clusters whose agents another
// replica holds are asked of it, one request per replica for all of its
// share, read as the caller gets to them; the others are answered here,
// fleetQueryWorkers at a time.
func (wb *Web) fleetAnswers(ctx context.Context, r *http.Request, p auth.Person, q store.Query, names []string) (<-chan chan clusterItems, func()) {
	var wg sync.WaitGroup
	holderOf := make([]string, len(names))
	byReplica := map[string][]string{}
	for i, name := range names {
		holderOf[i] = wb.holder(r, name)
		if h := holderOf[i]; h != "" {
			byReplica[h] = append(byReplica[h], name)
		}
	}
	shares := map[string]*replicaShare{}
	for replica, theirs := range byReplica {
		s := &replicaShare{wb: wb, replica: replica, names: theirs, answers: make(chan chan clusterItems, len(theirs))}
		shares[replica] = s
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.run(ctx, r.URL.RawQuery, p)
		}()
	}
	_, fromPeer := assertedPerson(r)
	pending := make(chan chan clusterItems, fleetQueryAhead)
	budget := newReviewBudget(wb.cfg.AccessReviewsPerQuery)
	go func() {
		defer close(pending)
		defer func() {
			for _, s := range shares {
				close(s.answers)
			}
		}()
		workers := make(chan struct{}, fleetQueryWorkers)
		for i, name := range names {
			if ctx.Err() != nil {
				return
			}
			answer := make(chan clusterItems, 1)
			select {
			case pending <- answer:
			case <-ctx.Done():
				return
			}
			if s := shares[holderOf[i]]; s != nil {
				s.answers <- answer
				continue
			}
			if fromPeer {
				if _, ok := wb.visible(name, p); !ok {
					// The replica that asked had another agents list
					// for a moment: the person learns nothing of it.
					answer <- clusterItems{name: name}
					continue
				}
				// Asked of this replica as the holder, but its agent has
				// moved on: another replica's store has it now.
				if up := wb.cfg.Clusters.Reach(name); up != nil && up.Replica() != "" {
					answer <- clusterItems{name: name, leftOut: fmt.Sprintf("its agent moved to the hub replica %q as it was asked: ask again", up.Replica())}
					continue
				}
			}
			workers <- struct{}{}
			go func() {
				// A cluster that can't be asked what p may list is left
				// out, as one with no inventory yet is, and the answer's
				// trailer names it.
				check := wb.checkAccess(name, p, budget)
				items, known := wb.cfg.Clusters.Inventory().Select(name, q, check.allow(ctx))
				why := check.leftOut(q.Kind) // with the items checked
				if err := check.failed(); err != nil {
					why = "Tether can't ask it what you may list: " + err.Error()
					items = nil
				} else if !known {
					why = "it has sent no inventory yet"
				}
				<-workers
				answer <- clusterItems{items: items, name: name, leftOut: why}
			}()
		}
	}()
	return pending, wg.Wait
}

// peerLine is a line of a replica's share of a fleet-wide answer
// (servePeerFleetResources): an item of a cluster, or the end of the
// cluster's items, with what was left out of it. Every cluster asked
// about has its end line, in the order asked.
type peerLine struct {
	Cluster string          `json:"cluster"`
	Item    json.RawMessage `json:"item,omitempty"`
	End     bool            `json:"end,omitempty"`
	LeftOut string          `json:"leftOut,omitempty"`
}

// maxPeerLine bounds a line of a replica's share: one item, which the
// store bounds far below it.
const maxPeerLine = 4 << 20

// maxPeerNames bounds the body naming the clusters a replica is asked
// about: 100,000 names of 63 characters.
const maxPeerNames = 8 << 20

// replicaShare is one replica's part of a fleet-wide answer: the
// clusters whose agents it holds, asked of it in one request.
type replicaShare struct {
	wb      *Web
	replica string
	names   []string
	answers chan chan clusterItems // for names, in order
}

// run asks the replica, then gives each answer-to-be that comes the next
// cluster's items as they are read. A replica that doesn't answer within
// ReplicaTimeout, or whose answer ends early or makes no sense, has the
// clusters it had yet to give left out, each named.
func (s *replicaShare) run(ctx context.Context, query string, p auth.Person) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	timeout := s.wb.cfg.ReplicaTimeout
	slow := fmt.Errorf("it gave nothing for %s", timeout)
	watchdog := time.AfterFunc(timeout, func() { cancel(slow) })
	defer watchdog.Stop()
	var lines *bufio.Scanner
	failed := func() error {
		body, _ := json.Marshal(struct {
			Clusters []string `json:"clusters"`
		}{s.names})
		resp, err := s.wb.askReplica(ctx, s.replica, http.MethodPost, PeerPath+"resources", query, p, bytes.NewReader(body))
		if err != nil {
			return cause(ctx, err)
		}
		context.AfterFunc(ctx, func() { resp.Body.Close() })
		if resp.StatusCode != http.StatusOK {
			why, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
			return fmt.Errorf("it answered %s: %s", resp.Status, strings.TrimSpace(string(why)))
		}
		lines = bufio.NewScanner(resp.Body)
		lines.Buffer(make([]byte, 0, 64<<10), maxPeerLine)
		return nil
	}()
	watchdog.Stop()
	i := 0
	for answer := range s.answers {
		name := s.names[i]
		i++
		if failed == nil {
			watchdog.Reset(timeout)
			var c clusterItems
			c, failed = s.read(lines, name)
			watchdog.Stop()
			if failed == nil {
				answer <- c
				continue
			}
			failed = cause(ctx, failed)
			cancel(failed) // the rest is not read: the replica stops
		}
		answer <- clusterItems{name: name, leftOut: fmt.Sprintf("the hub replica %q, which holds its agent, didn't answer: %v", s.replica, failed)}
	}
}

// read reads cluster name's items and end line.
func (s *replicaShare) read(lines *bufio.Scanner, name string) (clusterItems, error) {
	c := clusterItems{name: name}
	for lines.Scan() {
		var l peerLine
		if err := json.Unmarshal(lines.Bytes(), &l); err != nil {
			return clusterItems{}, fmt.Errorf("a line of its answer is not JSON: %w", err)
		}
		if l.Cluster != name {
			return clusterItems{}, fmt.Errorf("its answer gave cluster %q where %q was due", l.Cluster, name)
		}
		if l.End {
			c.leftOut = l.LeftOut
			return c, nil
		}
		if len(l.Item) == 0 {
			return clusterItems{}, errors.New("a line of its answer has neither an item nor an end")
		}
		c.raw = append(c.raw, l.Item)
	}
	if err := lines.Err(); err != nil {
		return clusterItems{}, err
	}
	return clusterItems{}, errors.New("its answer ended early")
}

// cause is ctx's cause when it ended (the watchdog's), else err.
func cause(ctx context.Context, err error) error {
	if c := context.Cause(ctx); c != nil && !errors.Is(c, context.Canceled) {
		return c
	}
	return err
}

// servePeerFleetResources answers, for another replica, the query of a
// fleet-wide /api/resources for the clusters it names, whose agents this
// replica holds, as peerLines in the order named.
func (wb *Web) servePeerFleetResources(w http.ResponseWriter, r *http.Request) {
	p, _ := assertedPerson(r)
	var asked struct {
		Clusters []string `json:"clusters"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxPeerNames)).Decode(&asked); err != nil {
		http.Error(w, "the clusters asked about: "+err.Error(), http.StatusBadRequest)
		return
	}
	// The replica that asked took the kind for an extra kind of a cluster
	// another replica holds: one this replica's clusters don't announce
	// adds nothing, as on one hub, and no one may list it (accessCheck).
	q, err := parseQuery(r, func(string) bool { return true })
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	pending, wait := wb.fleetAnswers(ctx, r, p, q, asked.Clusters)
	defer wait()
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	lines := &lineWriter{w: w}
	for answer := range pending {
		var c clusterItems
		select {
		case c = <-answer:
		default:
			if lines.err == nil {
				lines.err = rc.Flush()
			}
			c = <-answer
		}
		lines.items(c.name, c.items)
		lines.write(peerLine{Cluster: c.name, End: true, LeftOut: c.leftOut})
		if lines.err != nil {
			cancel() // the replica that asked is gone; the rest only drains
		}
	}
}
