package fsm

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/hashicorp/raft"

	"github.com/fencelock/fencelock"
)

// state is the snapshot's wire form.
type state struct {
	Applied  uint64            `json:"applied"`
	Locks    []Lock            `json:"locks"`
	Requests []record          `json:"requests"`
	Expired  []record          `json:"expired"`
	Members  map[string]string `json:"members,omitempty"`
	LastNow  int64             `json:"last_now"`
}

type snapshot struct {
	st state // all but Requests and Expired
	// The dedupe window as it was: the order slices at Snapshot (later
	// entries append beyond their length or move them, never overwrite
	// them) and the drop count then; a record is in the snapshot unless it
	// left its map before (record.died).
	reqs, exps []*record
	drops      uint64
}

// Snapshot captures the whole state. Raft calls it on the goroutine that
// applies entries, which waits meanwhile, so it copies only the lock table
// and the members, under the lock. The dedupe window (every request id of
// the last 10 minutes: millions on a busy node, whose copy stalled every
// grant for hundreds of milliseconds) is captured as it stands, in
// constant time, and read by Persist, which encodes everything on another
// goroutine while later entries apply.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	st := state{Applied: f.applied, LastNow: f.lastNow, Locks: make([]Lock, 0, len(f.locks)), Members: make(map[string]string, len(f.members))}
	for k, v := range f.members {
		st.Members[k] = v
	}
	for _, l := range f.locks {
		st.Locks = append(st.Locks, l.clone())
	}
	return &snapshot{st: st, reqs: f.reqOrder, exps: f.expOrder, drops: f.drops}, nil
}

// live returns the records of order that were in their map when the
// snapshot was taken.
func (s *snapshot) live(order []*record) []record {
	out := make([]record, 0, len(order))
	for _, rec := range order {
		if died := atomic.LoadUint64(&rec.died); died == 0 || died > s.drops {
			out = append(out, rec.wire())
		}
	}
	return out
}

// Persist encodes the snapshot and writes it to sink.
func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	st := s.st
	st.Requests, st.Expired = s.live(s.reqs), s.live(s.exps)
	w := bufio.NewWriterSize(sink, 64<<10)
	err := json.NewEncoder(w).Encode(st)
	if err == nil {
		err = w.Flush()
	}
	if err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("write snapshot: %w", err)
	}
	return sink.Close()
}

// Release does nothing: the snapshot holds copies and records that never
// change.
func (s *snapshot) Release() {}

// Restore replaces the whole state with the snapshot's; it never merges.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var st state
	if err := json.NewDecoder(rc).Decode(&st); err != nil {
		return fmt.Errorf("decode snapshot: %w", err)
	}
	f.mu.Lock()
	f.reset()
	f.applied = st.Applied
	f.lastNow = st.LastNow
	for k, v := range st.Members {
		f.members[k] = v
	}
	for i := range st.Locks {
		l := st.Locks[i]
		f.locks[l.Name] = &l
	}
	for i := range st.Requests {
		rec := st.Requests[i]
		f.requests[rec.Key] = &rec
		f.reqOrder = append(f.reqOrder, &rec)
	}
	for i := range st.Expired {
		rec := st.Expired[i]
		f.expired[fencelock.LeaseID(rec.Key)] = &rec
		f.expOrder = append(f.expOrder, &rec)
	}
	f.mu.Unlock()
	if f.obs != nil {
		f.obs.Restored()
	}
	return nil
}
