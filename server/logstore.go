package server

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/fencelock/fencelock/internal/raftlog"
)

// raftStore is a node's Raft storage: the log in DataDir/raftlog
// (internal/raftlog, one fdatasync per batch of entries) and the small
// stable store (current term, vote) in DataDir/raft.db (raft-boltdb).
//
// Before the log moved to internal/raftlog, raft-boltdb held it too, with
// two syncs per append. hashicorp/raft-wal was tried for fewer syncs and
// dropped: after kill -9 during a leader change it could leave a sealed
// segment without an index block, and the node then panicked at every
// start (raft-wal issue 31). internal/raftlog is tested by killing a writer
// with SIGKILL at random points and by the cluster soak test.
type raftStore struct {
	*raftlog.Store
	stable *raftboltdb.BoltStore
	// appended, if set, learns the entries of each append (one sync each).
	appended func(entries int)
}

// StoreLog appends one entry and syncs.
func (s *raftStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs appends logs and syncs once.
func (s *raftStore) StoreLogs(logs []*raft.Log) error {
	err := s.Store.StoreLogs(logs)
	if err == nil && len(logs) > 0 && s.appended != nil {
		s.appended(len(logs))
	}
	return err
}

var (
	_ raft.LogStore    = (*raftStore)(nil)
	_ raft.StableStore = (*raftStore)(nil)
)

func openLogStore(cfg Config) (*raftStore, error) {
	// raft.db's file lock is the data dir's: the first thing a node opens
	// there, held until Close. Another node on the same dir gives up after
	// a second instead of waiting for it forever.
	path := filepath.Join(cfg.DataDir, "raft.db")
	b, err := raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: &bbolt.Options{Timeout: time.Second}})
	if errors.Is(err, bbolt.ErrTimeout) {
		return nil, fmt.Errorf("open %s: another node is using the data dir %s", path, cfg.DataDir)
	}
	if err != nil {
		return nil, fmt.Errorf("open raft stable store: %w", err)
	}
	l, err := raftlog.Open(filepath.Join(cfg.DataDir, "raftlog"), raftlog.Options{})
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("open raft log: %w", err)
	}
	if cut := l.Cut(); cut != "" {
		// Raft fetches what was past the cut again from a leader that
		// holds it.
		cfg.Logger.Warn("raft log: cut its end on open", "what", cut)
	}
	if err := moveBoltLogs(b, l); err != nil {
		l.Close()
		b.Close()
		return nil, err
	}
	return &raftStore{Store: l, stable: b}, nil
}

// moveBoltLogs moves the entries of a data dir written by a version that
// kept the log in raft.db into the new log. It is safe to interrupt at any
// point: it resumes after the last entry already moved, and removes the
// entries from raft.db only once the new log holds them all (durably).
// Gaps (left by an installed snapshot) are kept as gaps.
func moveBoltLogs(b *raftboltdb.BoltStore, l *raftlog.Store) error {
	first, err := b.FirstIndex()
	if err != nil || first == 0 {
		return err
	}
	last, err := b.LastIndex()
	if err != nil {
		return err
	}
	mine, err := l.LastIndex()
	if err != nil {
		return err
	}
	var batch []*raft.Log
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := l.StoreLogs(batch); err != nil {
			return fmt.Errorf("move raft log entries %d-%d out of raft.db: %w", batch[0].Index, batch[len(batch)-1].Index, err)
		}
		batch = batch[:0]
		return nil
	}
	for i := max(first, mine+1); i <= last; i++ {
		e := new(raft.Log)
		switch err := b.GetLog(i, e); {
		case errors.Is(err, raft.ErrLogNotFound):
			if err := flush(); err != nil { // a gap: the next entry starts a new run
				return err
			}
			continue
		case err != nil:
			return fmt.Errorf("move raft log entry %d out of raft.db: %w", i, err)
		}
		batch = append(batch, e)
		if len(batch) == 512 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	if got, err := l.LastIndex(); err != nil || got < last {
		return fmt.Errorf("move raft log out of raft.db: the new log ends at %d, raft.db at %d (%v)", got, last, err)
	}
	if err := b.DeleteRange(first, last); err != nil {
		return fmt.Errorf("remove moved raft log from raft.db: %w", err)
	}
	return nil
}

func (s *raftStore) Set(key, val []byte) error            { return s.stable.Set(key, val) }
func (s *raftStore) Get(key []byte) ([]byte, error)       { return s.stable.Get(key) }
func (s *raftStore) SetUint64(key []byte, v uint64) error { return s.stable.SetUint64(key, v) }
func (s *raftStore) GetUint64(key []byte) (uint64, error) { return s.stable.GetUint64(key) }

// Close closes the log and the stable store.
func (s *raftStore) Close() error { return errors.Join(s.Store.Close(), s.stable.Close()) }
