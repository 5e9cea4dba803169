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
// hashicorp/raft-wal is not used: after kill -9 during a leader change it
// could leave a sealed segment without an index block, and the node then
// panicked at every start (raft-wal issue 31). internal/raftlog is tested
// by killing a writer with SIGKILL at random points and by the cluster soak
// test.
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
	return &raftStore{Store: l, stable: b}, nil
}

func (s *raftStore) Set(key, val []byte) error            { return s.stable.Set(key, val) }
func (s *raftStore) Get(key []byte) ([]byte, error)       { return s.stable.Get(key) }
func (s *raftStore) SetUint64(key []byte, v uint64) error { return s.stable.SetUint64(key, v) }
func (s *raftStore) GetUint64(key []byte) (uint64, error) { return s.stable.GetUint64(key) }

// Close closes the log and the stable store.
func (s *raftStore) Close() error { return errors.Join(s.Store.Close(), s.stable.Close()) }
