package server

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/fencelock/fencelock/internal/raftlog"
	"github.com/fencelock/fencelock/internal/testproc"
)

// TestOpenLogStore_MovesBoltLog: a data dir whose log is still in raft.db
// (written before the log moved to internal/raftlog) keeps its entries.
func TestOpenLogStore_MovesBoltLog(t *testing.T) {
	dir := t.TempDir()
	old, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
	if err != nil {
		t.Fatal(err)
	}
	var logs []*raft.Log
	for i := uint64(3); i <= 7; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 2, Type: raft.LogCommand, Data: []byte{byte(i)}})
	}
	if err := old.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	if err := old.SetUint64([]byte("CurrentTerm"), 2); err != nil {
		t.Fatal(err)
	}
	old.Close()

	for round := 0; round < 2; round++ { // the second open finds nothing left to move
		s, err := openLogStore(Config{DataDir: dir})
		if err != nil {
			t.Fatalf("openLogStore = %v", err)
		}
		first, _ := s.FirstIndex()
		last, _ := s.LastIndex()
		if first != 3 || last != 7 {
			t.Fatalf("round %d: log spans %d..%d, want 3..7", round, first, last)
		}
		var e raft.Log
		if err := s.GetLog(5, &e); err != nil || e.Term != 2 || e.Data[0] != 5 {
			t.Fatalf("round %d: entry 5 = %+v, %v; want term 2, data [5]", round, e, err)
		}
		if term, err := s.GetUint64([]byte("CurrentTerm")); err != nil || term != 2 {
			t.Fatalf("round %d: current term = %d, %v; want 2", round, term, err)
		}
		if n, _ := s.stable.LastIndex(); n != 0 {
			t.Fatalf("round %d: raft.db still holds entries up to %d", round, n)
		}
		s.Close()
	}
}

// TestOpenLogStore_MoveResumesAndKeepsGaps: a move interrupted part way
// (the new log holds a prefix, raft.db still everything) resumes after that
// prefix and loses nothing; a gap in raft.db stays a gap.
func TestOpenLogStore_MoveResumesAndKeepsGaps(t *testing.T) {
	dir := t.TempDir()
	old, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
	if err != nil {
		t.Fatal(err)
	}
	entry := func(i uint64) *raft.Log {
		return &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: []byte{byte(i)}}
	}
	var logs []*raft.Log
	for i := uint64(1); i <= 100; i++ {
		if i < 40 || i > 60 { // 40..60: a gap
			logs = append(logs, entry(i))
		}
	}
	if err := old.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	old.Close()
	// The interrupted move: the new log holds 1..10.
	partial, err := raftlog.Open(filepath.Join(dir, "raftlog"), raftlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := partial.StoreLogs(logs[:10]); err != nil {
		t.Fatal(err)
	}
	partial.Close()

	s, err := openLogStore(Config{DataDir: dir})
	if err != nil {
		t.Fatalf("openLogStore after an interrupted move = %v", err)
	}
	defer s.Close()
	for i := uint64(1); i <= 100; i++ {
		var e raft.Log
		err := s.GetLog(i, &e)
		switch {
		case i >= 40 && i <= 60:
			if !errors.Is(err, raft.ErrLogNotFound) {
				t.Fatalf("entry %d, in the gap, = %v, want ErrLogNotFound", i, err)
			}
		case err != nil || e.Data[0] != byte(i):
			t.Fatalf("entry %d = %+v, %v; lost in the move", i, e, err)
		}
	}
	if n, _ := s.stable.LastIndex(); n != 0 {
		t.Fatalf("raft.db still holds entries up to %d after a complete move", n)
	}
}

// A second node on a data dir in use fails at once with a clear error; it
// waited for raft.db's file lock forever, deaf to signals.
func TestOpen_DataDirInUse(t *testing.T) {
	first := openInProcess(t)
	cfg := first.cfg
	cfg.RaftAddr = testproc.FreeAddr(t)
	done := make(chan error, 1)
	go func() {
		s, err := Open(context.Background(), cfg)
		if err == nil {
			s.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "another node is using the data dir") {
			t.Fatalf("a second Open of the data dir = %v, want an error that another node uses it", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a second Open of a data dir in use still waits after 30s")
	}
}
