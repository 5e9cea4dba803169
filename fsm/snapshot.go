package fsm

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/raft"

	"github.com/fencelock/fencelock"
)

// state is the snapshot's wire form.
type state struct {
	Version  int               `json:"version"` // formatVersion
	Applied  uint64            `json:"applied"`
	Locks    []Lock            `json:"locks"`
	Requests []record          `json:"requests"`
	Expired  []record          `json:"expired"`
	Members  map[string]string `json:"members,omitempty"`
	LastNow  int64             `json:"last_now"`
	// The cluster's identity: its id, token epoch and signing keys (the
	// private keys: a snapshot, like a data dir, is as secret as they are).
	ClusterID string       `json:"cluster_id,omitempty"`
	Epoch     uint64       `json:"epoch,omitempty"`
	Keys      []SigningKey `json:"keys,omitempty"`
}

type snapshot struct {
	st state // all but Requests and Expired
	// The dedupe window as it was (see window).
	reqs, exps windowView
}

// Snapshot captures the whole state. Raft calls it on the goroutine that
// applies entries, which waits meanwhile, so it copies only the lock table
// and the members, under the lock. The dedupe window (the requests whose
// grant ended in the last minute: hundreds of thousands on a busy node) is
// captured as it stands, by its chunks' headers (no key is copied), and
// read by Persist, which encodes everything on another goroutine while
// later entries apply.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	st := state{Version: formatVersion, Applied: f.applied, LastNow: f.lastNow,
		Locks: make([]Lock, 0, len(f.locks)), Members: make(map[string]string, len(f.members)),
		ClusterID: f.identity.ClusterID, Epoch: f.identity.Epoch, Keys: slices.Clone(f.identity.Keys)}
	for k, v := range f.members {
		st.Members[k] = v
	}
	for _, l := range f.locks {
		st.Locks = append(st.Locks, l.export(-1))
	}
	return &snapshot{st: st, reqs: f.requests.view(), exps: f.expired.view()}, nil
}

// Persist encodes the snapshot and writes it to sink: the JSON object that
// encoding/json writes for state, byte for byte, which Restore decodes with
// encoding/json. The dedupe window, most of a busy node's snapshot, is
// written by hand: through reflection it took seconds of the node's
// processor for a million request ids.
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
	// In name order, so that two snapshots of one state are the same bytes.
	slices.SortFunc(s.st.Locks, func(a, b Lock) int { return strings.Compare(string(a.Name), string(b.Name)) })
	locks, err := json.Marshal(s.st.Locks)
	if err != nil {
		return err
	}
	b := make([]byte, 0, 64<<10)
	b = append(b, `{"version":`...)
	b = strconv.AppendInt(b, int64(s.st.Version), 10)
	b = append(b, `,"applied":`...)
	b = strconv.AppendUint(b, s.st.Applied, 10)
	b = append(b, `,"locks":`...)
	b = append(b, locks...)
	var werr error
	for _, part := range []struct {
		key  string
		view windowView
	}{{`,"requests":[`, s.reqs}, {`],"expired":[`, s.exps}} {
		b = append(b, part.key...)
		first := true
		part.view.each(func(key, name []byte, token uint64, now int64) bool {
			if !first {
				b = append(b, ',')
			}
			first = false
			b = appendRecordJSON(b, key, name, token, now)
			if len(b) >= 60<<10 {
				_, werr = w.Write(b)
				b = b[:0]
			}
			return werr == nil
		})
		if werr != nil {
			return werr
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
	ident, err := json.Marshal(struct {
		ClusterID string       `json:"cluster_id,omitempty"`
		Epoch     uint64       `json:"epoch,omitempty"`
		Keys      []SigningKey `json:"keys,omitempty"`
	}{s.st.ClusterID, s.st.Epoch, s.st.Keys})
	if err != nil {
		return err
	}
	if len(ident) > 2 { // not {}
		b = append(b, ',')
		b = append(b, ident[1:len(ident)-1]...)
	}
	b = append(b, "}\n"...)
	_, err = w.Write(b)
	return err
}

// appendRecordJSON appends the record of key as encoding/json writes it.
func appendRecordJSON(b, key, name []byte, token uint64, now int64) []byte {
	b = append(b, `{"key":`...)
	b = appendJSONString(b, key)
	b = append(b, `,"name":`...)
	b = appendJSONString(b, name)
	if token != 0 {
		b = append(b, `,"token":`...)
		b = strconv.AppendUint(b, token, 10)
	}
	b = append(b, `,"now":`...)
	b = strconv.AppendInt(b, now, 10)
	return append(b, '}')
}

// appendJSONString appends s as encoding/json writes a string.
func appendJSONString(b, s []byte) []byte {
	if !plainJSON(s) {
		q, _ := json.Marshal(string(s)) // a string always encodes
		return append(b, q...)
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// plainJSON reports whether encoding/json writes s as it is: printable
// ASCII without the quote, the backslash and the HTML characters it escapes.
func plainJSON(s []byte) bool {
	for _, c := range s {
		switch {
		case c < 0x20, c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// Release lets go of the views of the windows (chunks the windows have
// pruned stay in memory while a snapshot views them).
func (s *snapshot) Release() { s.reqs, s.exps = windowView{}, windowView{} }

// Restore replaces the whole state with the snapshot's; it never merges.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var st state
	if err := json.NewDecoder(rc).Decode(&st); err != nil {
		return fmt.Errorf("decode snapshot: %w", err)
	}
	if st.Version != formatVersion {
		return fmt.Errorf("restore snapshot: format version %d, this build reads %d", st.Version, formatVersion)
	}
	for _, k := range st.Keys {
		if len(k.Seed) != seedSize || k.ID == "" {
			return fmt.Errorf("restore snapshot: signing key %q is not a %d-byte seed", k.ID, seedSize)
		}
	}
	if st.Epoch > fencelock.MaxTokenEpoch {
		return fmt.Errorf("restore snapshot: epoch %d is beyond the last, %d", st.Epoch, fencelock.MaxTokenEpoch)
	}
	f.mu.Lock()
	f.reset()
	f.applied = st.Applied
	f.lastNow = st.LastNow
	f.identity = Identity{ClusterID: st.ClusterID, Epoch: st.Epoch, Keys: st.Keys}
	for k, v := range st.Members {
		f.members[k] = v
	}
	for _, sl := range st.Locks {
		l := &lock{Name: sl.Name, Holder: sl.Holder}
		for _, w := range sl.Waiters {
			if l.queue.push(w) {
				f.waitersOf[w.Owner]++
			}
		}
		f.locks[l.Name] = l
	}
	for _, rec := range st.Requests {
		f.requests.put(rec.Key, string(rec.Name), uint64(rec.Token), rec.Now)
	}
	for _, rec := range st.Expired {
		f.expired.put(rec.Key, string(rec.Name), uint64(rec.Token), rec.Now)
	}
	f.mu.Unlock()
	if f.obs != nil {
		f.obs.Restored()
	}
	return nil
}
