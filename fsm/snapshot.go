package fsm

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"

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

type snapshot struct{ st state }

// Snapshot captures the whole state. It only copies, under the lock: Raft
// calls it on the goroutine that applies entries, which waits meanwhile.
// Persist encodes the copy on another goroutine while later entries apply
// (with every request id of the dedupe window, the encoding can take
// seconds; in Snapshot it stalled every grant for that long).
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	st := state{Applied: f.applied, LastNow: f.lastNow, Locks: make([]Lock, 0, len(f.locks)), Members: make(map[string]string, len(f.members)),
		Requests: make([]record, 0, len(f.requests)), Expired: make([]record, 0, len(f.expired))}
	for k, v := range f.members {
		st.Members[k] = v
	}
	for _, l := range f.locks {
		st.Locks = append(st.Locks, l.clone())
	}
	for _, rec := range f.reqOrder {
		if f.requests[rec.Key] == rec {
			st.Requests = append(st.Requests, *rec)
		}
	}
	for _, rec := range f.expOrder {
		if f.expired[fencelock.LeaseID(rec.Key)] == rec {
			st.Expired = append(st.Expired, *rec)
		}
	}
	return &snapshot{st: st}, nil
}

// Persist encodes the snapshot and writes it to sink.
func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	w := bufio.NewWriterSize(sink, 64<<10)
	err := json.NewEncoder(w).Encode(s.st)
	if err == nil {
		err = w.Flush()
	}
	if err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("write snapshot: %w", err)
	}
	return sink.Close()
}

// Release does nothing: the snapshot holds only bytes.
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
