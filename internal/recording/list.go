package recording

import (
	"bufio"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// ErrNotFound is the error of a recording that isn't there, or that the
// person may not see: the two answer alike.
var ErrNotFound = errors.New("recording: no such recording")

// MaxListed bounds a listing: the newest first.
const MaxListed = 500

// List returns the recordings of sessions on cluster, newest first: those
// of person, or everyone's. The header of each file says whose it is.
func (s *Store) List(cluster, person string, everyone bool) ([]Meta, error) {
	if !validName(cluster) {
		return nil, nil
	}
	entries, err := os.ReadDir(filepath.Join(s.cfg.Dir, cluster))
	if errors.Is(err, fs.ErrNotExist) {
		return []Meta{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := []Meta{}
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".cast")
		if !ok || !validName(id) {
			continue
		}
		m, err := s.meta(cluster, id)
		if err != nil || (!everyone && m.Person != person) {
			continue
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b Meta) int { return b.Time.Compare(a.Time) })
	if len(out) > MaxListed {
		out = out[:MaxListed]
	}
	return out, nil
}

// meta reads a recording's header.
func (s *Store) meta(cluster, id string) (Meta, error) {
	f, err := os.Open(filepath.Join(s.cfg.Dir, cluster, id+".cast"))
	if err != nil {
		return Meta{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Meta{}, err
	}
	h, err := readHeader(f)
	if err != nil || h.Tether.ID != id || h.Tether.Cluster != cluster {
		return Meta{}, ErrNotFound
	}
	h.Tether.Size = st.Size()
	return h.Tether, nil
}

// maxHeader bounds the first line read for a listing.
const maxHeader = 64 << 10

func readHeader(f *os.File) (Header, error) {
	line, err := bufio.NewReaderSize(f, maxHeader).ReadSlice('\n')
	if err != nil {
		return Header{}, err
	}
	var h Header
	err = json.Unmarshal(line, &h)
	return h, err
}

// Open returns recording id of cluster, if person may see it (theirs, or
// everyone's), for the caller to serve and close.
func (s *Store) Open(cluster, id, person string, everyone bool) (*os.File, Meta, error) {
	if !validName(cluster) || !validName(id) {
		return nil, Meta{}, ErrNotFound
	}
	m, err := s.meta(cluster, id)
	if err != nil || (!everyone && m.Person != person) {
		return nil, Meta{}, ErrNotFound
	}
	f, err := os.Open(filepath.Join(s.cfg.Dir, cluster, id+".cast"))
	if err != nil {
		return nil, Meta{}, ErrNotFound
	}
	return f, m, nil
}

func (s *Store) sweepLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.SweepEvery)
	defer t.Stop()
	for {
		s.sweep(time.Now())
		select {
		case <-t.C:
		case <-s.stop:
			return
		}
	}
}

// sweep deletes the recordings last written before now less Retention,
// and says how many.
func (s *Store) sweep(now time.Time) int {
	n := 0
	clusters, err := os.ReadDir(s.cfg.Dir)
	if err != nil {
		s.log.Error("Can't read the recordings", "err", err)
		return 0
	}
	for _, c := range clusters {
		if !c.IsDir() {
			continue
		}
		dir := filepath.Join(s.cfg.Dir, c.Name())
		files, _ := os.ReadDir(dir)
		for _, f := range files {
			if !strings.HasSuffix(f.Name(), ".cast") {
				continue
			}
			info, err := f.Info()
			if err != nil || now.Sub(info.ModTime()) <= s.cfg.Retention {
				continue
			}
			if err := os.Remove(filepath.Join(dir, f.Name())); err == nil {
				n++
			}
		}
	}
	return n
}
