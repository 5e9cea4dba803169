package server

import (
	"fmt"
	"path/filepath"

	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// openLogStore opens the Raft log and stable store, DataDir/raft.db
// (hashicorp/raft-boltdb, fsync on every append).
//
// hashicorp/raft-wal (one fsync per batch instead of two) was tried and
// dropped: after kill -9 during a leader change it could leave a sealed
// segment without an index block, and the node then panicked at start
// ("sealed segment has no index block", raft-wal issue 31), found by the
// cluster soak test.
func openLogStore(cfg Config) (*raftboltdb.BoltStore, error) {
	b, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(cfg.DataDir, "raft.db")})
	if err != nil {
		return nil, fmt.Errorf("open raft log: %w", err)
	}
	return b, nil
}
