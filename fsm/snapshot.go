package fsm

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
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

// Persist encodes the snapshot and writes it to sink: the JSON object that
// encoding/json writes for state, byte for byte (Restore, also of nodes of
// earlier releases, decodes it with encoding/json). The dedupe window, most
// of a busy node's snapshot, is written by hand: through reflection it took
// seconds of the node's processor for a million request ids.
func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	w := bufio.NewWriterSize(sink, 256<<10)
	err := s.encode(w)
	if err == nil {
		err = w.Flush()
	}
	if err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("write snapshot: %w", err)
	}
	return sink.Close()
}

func (s *snapshot) encode(w *bufio.Writer) error {
	locks, err := json.Marshal(s.st.Locks)
	if err != nil {
		return err
	}
	b := make([]byte, 0, 64<<10)
	b = append(b, `{"applied":`...)
	b = strconv.AppendUint(b, s.st.Applied, 10)
	b = append(b, `,"locks":`...)
	b = append(b, locks...)
	for _, part := range []struct {
		key   string
		order []*record
	}{{`,"requests":[`, s.reqs}, {`],"expired":[`, s.exps}} {
		b = append(b, part.key...)
		first := true
		for _, rec := range part.order {
			if died := atomic.LoadUint64(&rec.died); died != 0 && died <= s.drops {
				continue // it had left its map when the snapshot was taken
			}
			if !first {
				b = append(b, ',')
			}
			first = false
			b = rec.appendJSON(b)
			if len(b) >= 60<<10 {
				if _, err := w.Write(b); err != nil {
					return err
				}
				b = b[:0]
			}
		}
	}
	b = append(b, ']')
	if len(s.st.Members) > 0 {
		members, err := json.Marshal(s.st.Members)
		if err != nil {
			return err
		}
		b = append(b, `,"members":`...)
		b = append(b, members...)
	}
	b = append(b, `,"last_now":`...)
	b = strconv.AppendInt(b, s.st.LastNow, 10)
	b = append(b, "}\n"...)
	_, err = w.Write(b)
	return err
}

// appendJSON appends rec as encoding/json writes it.
func (rec *record) appendJSON(b []byte) []byte {
	b = append(b, `{"key":`...)
	b = appendJSONString(b, rec.Key)
	b = append(b, `,"name":`...)
	b = appendJSONString(b, string(rec.Name))
	if rec.Token != 0 {
		b = append(b, `,"token":`...)
		b = strconv.AppendUint(b, uint64(rec.Token), 10)
	}
	b = append(b, `,"now":`...)
	b = strconv.AppendInt(b, rec.Now, 10)
	return append(b, '}')
}

// appendJSONString appends s as encoding/json writes a string.
func appendJSONString(b []byte, s string) []byte {
	if plainJSON(s) {
		b = append(b, '"')
		b = append(b, s...)
		return append(b, '"')
	}
	q, _ := json.Marshal(s) // a string always encodes
	return append(b, q...)
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
