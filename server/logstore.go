package server

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
)

// Log stores the server can keep its Raft log and stable state in.
const (
	// LogStoreWAL is hashicorp/raft-wal: segment files, one fsync per
	// appended batch. The default.
	LogStoreWAL = "wal"
	// LogStoreBolt is hashicorp/raft-boltdb/v2: one bbolt file, two fsyncs
	// per appended batch.
	LogStoreBolt = "boltdb"
)

// logStore is what Raft needs from the log store.
type logStore interface {
	raft.LogStore
	raft.StableStore
	io.Closer
}

var (
	_ logStore = (*wal.WAL)(nil)
	_ logStore = (*raftboltdb.BoltStore)(nil)
)

// openLogStore opens the configured log store in the data dir: raft-wal in
// DataDir/wal, or bbolt in DataDir/raft.db. Both fsync every append. With
// no choice made, a data dir that holds raft.db keeps bbolt; others get the
// WAL.
func openLogStore(cfg Config, log hclog.Logger) (logStore, error) {
	kind := cfg.LogStore
	if kind == "" {
		kind = LogStoreWAL
		if _, err := os.Stat(filepath.Join(cfg.DataDir, "raft.db")); err == nil {
			kind = LogStoreBolt
		}
	}
	switch kind {
	case LogStoreWAL:
		dir := filepath.Join(cfg.DataDir, "wal")
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("create wal dir: %w", err)
		}
		w, err := wal.Open(dir, wal.WithLogger(log))
		if err != nil {
			return nil, fmt.Errorf("open raft log (wal): %w", err)
		}
		return w, nil
	case LogStoreBolt:
		b, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(cfg.DataDir, "raft.db")})
		if err != nil {
			return nil, fmt.Errorf("open raft log (boltdb): %w", err)
		}
		return b, nil
	}
	return nil, fmt.Errorf("unknown log store %q: want %q or %q", cfg.LogStore, LogStoreWAL, LogStoreBolt)
}
