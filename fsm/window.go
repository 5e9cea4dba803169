package fsm

import (
	"hash/maphash"
	"sync/atomic"
)

// window remembers keys (requests whose grant ended, or the lease ids of
// expired grants) with an outcome, in command-time order, for the dedupe
// window. A busy node
// remembers millions of them; held as one object each (with their strings
// and the map entries pointing at them) they were a quarter of the node's
// processor in garbage collection, which traced every one on every cycle.
// So a window holds no pointers: fixed-size slots in one slice, their keys
// and lock names in one byte slice, and a map from a hash of the key to the
// slot. The collector never looks inside them.
//
// Slots are appended in order and cut off the front by prune. A slot never
// changes once appended, except died, which marks a slot whose key was
// forgotten or given a new outcome (a new slot) other than by prune. A
// snapshot keeps the slices as they are (later appends go past their
// length or into new arrays; prune only reslices) and the drop count, so
// it reads the window as it was without copying it (see Snapshot).
type window struct {
	seed  maphash.Seed
	hash  func(seed maphash.Seed, key string) uint64 // maphash.String; tests make keys collide
	slots []slot                                     // slots[i] has sequence number first+i
	first uint64
	// index maps the hash of each key in the window to its slot's sequence
	// number; clash holds the keys whose hash another key in the window
	// had first (rare: 64-bit hashes).
	index map[uint64]uint64
	clash map[string]uint64
	bytes []byte // bytes[i] is byte off+i of the stream of keys and names
	off   uint64
	drops uint64 // slots marked died so far
}

// slot is one key's outcome. Its key and name are bytes at..at+keyLen and
// the nameLen bytes after them.
type slot struct {
	at      uint64
	keyLen  uint32
	nameLen uint32
	token   uint64
	now     int64
	died    uint64 // the drop count when it left the window, 0 while in it; atomic (snapshots read it)
}

func newWindow() *window {
	return &window{seed: maphash.MakeSeed(), hash: maphash.String,
		index: make(map[uint64]uint64), clash: make(map[string]uint64)}
}

// len returns how many keys the window holds.
func (w *window) len() int { return len(w.index) + len(w.clash) }

func keyOf(b []byte, off uint64, s *slot) []byte {
	return b[s.at-off : s.at-off+uint64(s.keyLen)]
}

func nameOf(b []byte, off uint64, s *slot) []byte {
	i := s.at - off + uint64(s.keyLen)
	return b[i : i+uint64(s.nameLen)]
}

// at returns the slot of sequence number seq.
func (w *window) at(seq uint64) *slot { return &w.slots[seq-w.first] }

// find returns key's slot and its sequence number.
func (w *window) find(key string) (*slot, uint64, bool) {
	s, seq, ok, _ := w.findHashed(key, w.hash(w.seed, key))
	return s, seq, ok
}

// findHashed is find of key whose hash is h; other reports that h stands
// for another key in the window.
func (w *window) findHashed(key string, h uint64) (s *slot, seq uint64, ok, other bool) {
	seq, other = w.index[h]
	if other {
		if s := w.at(seq); string(keyOf(w.bytes, w.off, s)) == key {
			return s, seq, true, false
		}
	}
	if len(w.clash) > 0 {
		if seq, ok := w.clash[key]; ok {
			return w.at(seq), seq, true, other
		}
	}
	return nil, 0, false, other
}

// lookup returns the token recorded for key, if key is in the window with
// lock name.
func (w *window) lookup(key, name string) (token uint64, ok bool) {
	s, _, ok := w.find(key)
	if !ok || string(nameOf(w.bytes, w.off, s)) != name {
		return 0, false
	}
	return s.token, true
}

// forget removes key from the window (a snapshot taken before still holds
// it) and reports whether it was there.
func (w *window) forget(key string) bool {
	h := w.hash(w.seed, key)
	s, seq, ok, _ := w.findHashed(key, h)
	if ok {
		w.drop(key, h, s, seq)
	}
	return ok
}

// drop marks slot s (of key, hash h, sequence number seq) died and takes
// key out of the index.
func (w *window) drop(key string, h uint64, s *slot, seq uint64) {
	w.drops++
	atomic.StoreUint64(&s.died, w.drops)
	w.unindex(key, h, seq)
}

func (w *window) unindex(key string, h, seq uint64) {
	if got, ok := w.index[h]; ok && got == seq {
		delete(w.index, h)
		return
	}
	delete(w.clash, key)
}

// put records key's outcome at command time now, replacing any earlier one.
// Times must not go back (prune cuts from the front).
func (w *window) put(key, name string, token uint64, now int64) {
	h := w.hash(w.seed, key)
	s, seq, ok, other := w.findHashed(key, h)
	if ok {
		w.drop(key, h, s, seq)
	}
	at := w.off + uint64(len(w.bytes))
	w.bytes = append(append(w.bytes, key...), name...)
	w.slots = append(w.slots, slot{at: at, keyLen: uint32(len(key)), nameLen: uint32(len(name)), token: token, now: now})
	seq = w.first + uint64(len(w.slots)) - 1
	if !other {
		w.index[h] = seq
	} else {
		w.clash[key] = seq
	}
}

// prune forgets the keys recorded before cut.
func (w *window) prune(cut int64) {
	n := 0
	for n < len(w.slots) && w.slots[n].now < cut {
		s := &w.slots[n]
		seq := w.first + uint64(n)
		if atomic.LoadUint64(&s.died) == 0 {
			// No drop mark: a snapshot taken earlier holds this slot in
			// its part of the slice, which pruning only cuts off ours.
			key := string(keyOf(w.bytes, w.off, s))
			w.unindex(key, w.hash(w.seed, key), seq)
		}
		n++
	}
	if n == 0 {
		return
	}
	w.slots = w.slots[n:]
	w.first += uint64(n)
	if len(w.slots) == 0 {
		// Not bytes[:0]: appends must never write over bytes that a
		// snapshot may still read.
		w.bytes, w.off = w.bytes[len(w.bytes):], w.off+uint64(len(w.bytes))
	} else {
		cutAt := w.slots[0].at
		w.bytes, w.off = w.bytes[cutAt-w.off:], cutAt
	}
}

// windowView is a window as it was when a snapshot was taken.
type windowView struct {
	slots []slot
	bytes []byte
	off   uint64
	drops uint64
}

func (w *window) view() windowView {
	return windowView{slots: w.slots, bytes: w.bytes, off: w.off, drops: w.drops}
}

// each calls fn with every key that was in the window when v was taken, in
// order, until fn returns false.
func (v windowView) each(fn func(key, name []byte, token uint64, now int64) bool) {
	for i := range v.slots {
		s := &v.slots[i]
		if died := atomic.LoadUint64(&s.died); died != 0 && died <= v.drops {
			continue
		}
		if !fn(keyOf(v.bytes, v.off, s), nameOf(v.bytes, v.off, s), s.token, s.now) {
			return
		}
	}
}
